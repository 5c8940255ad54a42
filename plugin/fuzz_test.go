package plugin

// Bad configuration input (issue 5, docs/reliability.md): the flags, the
// options and the environment a plugin binary reads, fuzzed through
// Flags.Options and New with a private handover directory. New never
// panics, rejects exactly what is invalid, and every rejection names the
// offending value in its first line; an accepted instance has the identity
// it was given.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/failpoint"
	"github.com/nri-handover/nri-handover/internal/names"
	"github.com/nri-handover/nri-handover/stamp"
)

// fzAuthor is a minimal NRI plugin.
type fzAuthor struct{}

func (fzAuthor) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func fzLogger() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// fzRoot is a short private handover root (unix socket paths are short).
func fzRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "nhz-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return root
}

// closeInstance runs a created instance with a cancelled context: Run
// returns at once, after closing its handover service.
func closeInstance(t *testing.T, p *Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run with a cancelled context: %v", err)
	}
}

// validInstanceID is the rule stamps apply to instance ids (stamp.Sign):
// 1..128 characters of [-_.a-zA-Z0-9].
func validInstanceID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// maxSocketPath is the longest path a unix socket can be bound to.
const maxSocketPath = 107

// FuzzNew fuzzes the configuration a plugin binary takes: the -name,
// -idx, -instance and -policy flags (Flags.Options), the version and claim
// timeout options, and the environment ($NRI_PLUGIN_NAME, $NRI_PLUGIN_IDX,
// $NRI_HANDOVER_INSTANCE, $NRI_HANDOVER_POLICY, $NRI_HANDOVER_FAILPOINT).
// An independent oracle, checked in the order New checks, says which value
// must be refused and what the error must then contain.
func FuzzNew(f *testing.F) {
	f.Add("audit", "10", "pod-a", "", "1.0.0", int64(500), "", "", "", "", "")
	f.Add("", "", "", "newest-version", "v2.1.0-rc.1+b.5", int64(1), "audit", "07", "pod-b", "newest-instance", "owner:kill")
	f.Add("a/b", "7", "x y", "oldest", "v1..2", int64(-1), "", "", "", "bogus", "owner")
	f.Add("", "", "", "", "1.0.0", int64(500), "", "", "", "", "")
	f.Add("x", "1a", "", "", "", int64(500), "", "", "", "", "yield-decided:stop")
	f.Add("-x", "99", strings.Repeat("i", 129), "", "1.0;0", int64(0), "", "", "", "", ":kill")
	f.Fuzz(func(t *testing.T, name, idx, instance, policy, ver string, claimMs int64,
		envName, envIdx, envInstance, envPolicy, envFailpoint string) {
		env := map[string]string{
			api.PluginNameEnvVar: envName, api.PluginIdxEnvVar: envIdx, EnvInstance: envInstance,
			EnvPolicy: envPolicy, failpoint.Env: envFailpoint,
		}
		for _, v := range env {
			if strings.ContainsRune(v, 0) {
				return // not representable in an environment
			}
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		t.Setenv(EnvDir, "")

		flags := &Flags{name: name, idx: idx, instance: instance, policy: policy,
			socket: "/nonexistent/flag.sock", dir: "/nonexistent/flag-dir", metricsAddr: ":1"}
		opts, err := flags.Options()
		if _, perr := handover.ParsePolicy(policy); perr != nil {
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(policy)) {
				t.Fatalf("Flags.Options with policy %q: %v, want an error quoting it", policy, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Flags.Options: %v", err)
		}
		root := fzRoot(t)
		claim := time.Duration(claimMs) * time.Millisecond
		opts = append(opts, WithVersion(ver), WithClaimTimeout(claim), WithHandoverDir(root),
			WithSocketPath(filepath.Join(root, "none.sock")), WithMetricsAddr(""), WithLogger(fzLogger()))
		p, err := New(fzAuthor{}, opts...)

		// The oracle, in New's order: what must be refused, and how.
		wantName, wantIdx, wantID := name, idx, instance
		if wantName == "" {
			wantName = envName
		}
		if wantIdx == "" {
			wantIdx = envIdx
		}
		if wantID == "" {
			wantID = envInstance
		}
		if wantName == "" {
			wantName = filepath.Base(os.Args[0]) // not NN-name: no index from it
		}
		_, envPolicyErr := handover.ParsePolicy(envPolicy)
		_, verErr := stamp.ParseVersion(ver)
		nameErr := api.CheckPluginName(wantName) // NRI's rule; names.Key maps the rest
		keyName := names.Key(wantName)
		step, action, hasColon := strings.Cut(envFailpoint, ":")
		_ = step
		sockID := wantID
		if sockID == "" {
			sockID = randomID() // same length as the one New draws
		}
		sock := filepath.Join(root, keyName, "instances", sockID+".sock")
		var want string // a fragment the error must contain; "" if New must succeed
		switch {
		case claim <= 0:
			want = "claim timeout " + claim.String() + ": must be positive"
		case policy == "" && envPolicyErr != nil:
			want = "$" + EnvPolicy + ": unknown handover policy " + strconv.Quote(envPolicy)
		case ver == "":
			want = "plugin version not set"
		case verErr != nil:
			want = "invalid plugin version " + strconv.Quote(ver)
		case wantIdx == "":
			want = "plugin index not set"
		case len(wantIdx) != 2 || wantIdx[0] < '0' || wantIdx[0] > '9' || wantIdx[1] < '0' || wantIdx[1] > '9':
			want = "invalid plugin index " + strconv.Quote(wantIdx) + ": want two digits"
		case envIdx != "" && envIdx != wantIdx:
			want = "conflicts with $" + api.PluginIdxEnvVar + "=" + strconv.Quote(envIdx)
		case nameErr != nil:
			want = "invalid plugin name " + strconv.Quote(wantName)
		case wantID != "" && !validInstanceID(wantID):
			want = "instance id (option, -handover-instance or $" + EnvInstance + "): invalid instance id"
		case failpoint.Enabled && envFailpoint != "" && (!hasColon || action != "kill" && action != "stop"):
			want = "$" + failpoint.Env + "=" + strconv.Quote(envFailpoint) + ": want <step>:kill or <step>:stop"
		case len(sock) > maxSocketPath:
			want = "handover: socket path "
		}
		if err != nil {
			if want == "" {
				t.Fatalf("New refused a valid configuration: %v", err)
			}
			// The first line says it (hashicorp/go-version's own message,
			// wrapped after it, repeats the raw input, newlines included).
			if first, _, _ := strings.Cut(err.Error(), "\n"); !strings.Contains(first, want) {
				t.Fatalf("New: error %q, want its first line to contain %q", err, want)
			}
			if want == "handover: socket path " && !strings.Contains(err.Error(), filepath.Dir(sock)) {
				t.Fatalf("New: error %q does not name the socket in %s", err, filepath.Dir(sock))
			}
			return
		}
		defer closeInstance(t, p)
		if want != "" {
			t.Fatalf("New accepted a configuration it must refuse with %q", want)
		}
		if p.Name() != wantName || p.Idx() != wantIdx || p.Instance().Version != ver {
			t.Fatalf("identity %s/%s %s, want %s/%s %s", p.Name(), p.Idx(), p.Instance().Version, wantName, wantIdx, ver)
		}
		id := p.Instance().ID
		if wantID != "" && id != wantID {
			t.Fatalf("instance id %q, want %q", id, wantID)
		}
		if !validInstanceID(id) {
			t.Fatalf("New accepted instance id %q, which stamps refuse", id)
		}
		if p.Status().Role != handover.RoleJoining {
			t.Fatalf("a new instance is %v, want joining", p.Status().Role)
		}
	})
}

// TestInstanceIDValidatedAtStart: instance ids come from a flag, an option
// or $NRI_HANDOVER_INSTANCE (the pod name). One that stamps refuse is refused
// at start with an error naming it. (It was B2, fixed: accepted, the
// instance's every CreateContainer as owner failed to stamp and the runtime
// rejected the container; an id with a path separator put the instance's
// socket outside the handover directory; one that is not UTF-8 made New
// panic on its metrics label.)
func TestInstanceIDValidatedAtStart(t *testing.T) {
	root := fzRoot(t)
	outside := filepath.Join(root, "escaped.sock")
	for _, id := range []string{"pod x", "pod\u00e9", "a;b", "../../../escaped", "pod\xfb", strings.Repeat("i", 129), ""} {
		var p *Plugin
		var err error
		panicked := func() (v any) {
			defer func() { v = recover() }()
			p, err = New(fzAuthor{}, WithVersion("1.0.0"), WithPluginName("audit"), WithPluginIdx("10"),
				WithHandoverDir(filepath.Join(root, "r")), WithInstanceID(id), WithLogger(fzLogger()),
				WithSocketPath(filepath.Join(root, "none.sock")))
			return nil
		}()
		switch {
		case panicked != nil:
			t.Errorf("instance id %q: New panicked: %v", id, panicked)
		case id == "":
			// No id: a random one, valid.
			if err != nil {
				t.Errorf("no instance id: %v", err)
			} else {
				if !validInstanceID(p.Instance().ID) {
					t.Errorf("random instance id %q is not a valid id", p.Instance().ID)
				}
				closeInstance(t, p)
			}
		case err == nil:
			_, escErr := os.Lstat(outside)
			t.Errorf("instance id %q accepted (socket outside the directory: %v)", id, escErr == nil)
			closeInstance(t, p)
		case !strings.Contains(err.Error(), strconv.Quote(id)) || !strings.Contains(err.Error(), EnvInstance):
			t.Errorf("instance id %q refused with %q, which does not name it and where it came from", id, err)
		}
	}
}
