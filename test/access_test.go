package test

// Access control (issue 5, docs/reliability.md): who may talk to an
// instance, and what a stamp must prove.
//
//   - The handover directory is 0700, each instance's socket 0600, and the
//     service requires the peer to have the same uid (ttrpc's
//     UnixSocketRequireSameUser handshaker): a process of another user is
//     refused by the file modes, and still refused by the handshake when
//     the modes are opened up.
//   - The stamp key is created once, 0600, and never rewritten by a later
//     instance; a key file with group/other access or the wrong size is
//     refused at start and left as it is.
//   - A stamp that does not verify (bad MAC, copied from another container,
//     signed with another node's key, malformed) is ignored, logged and
//     counted (Stats().BadStamps, nri_handover_invalid_stamps_total), on
//     CreateContainer and in Synchronize.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/protocol"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
	"github.com/nri-handover/nri-handover/internal/sim"
	"github.com/nri-handover/nri-handover/internal/testutil"
	"github.com/nri-handover/nri-handover/plugin"
	"github.com/nri-handover/nri-handover/plugin/metrics"
	"github.com/nri-handover/nri-handover/sample-plugins/audit"
	"github.com/nri-handover/nri-handover/stamp"
)

// Child processes: the test binary run again to do one thing as another
// user, or in a private mount namespace, and print one line.
const (
	envChild     = "NHT_CHILD"      // which child function to run
	envChildArgs = "NHT_CHILD_ARGS" // its arguments, a JSON list of strings
	envChildRO   = "NHT_CHILD_RO"   // a directory to bind-mount read-only first
)

var childFuncs = map[string]func(args []string) string{
	"new-plugin": childNewPlugin,
	"call":       childCall,
}

func init() {
	name := os.Getenv(envChild)
	if name == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(envChildArgs)), &args); err != nil {
		fmt.Print("bad child arguments: ", err)
		os.Exit(3)
	}
	if dir := os.Getenv(envChildRO); dir != "" {
		// The child runs in a mount namespace of its own (made private
		// by os/exec), so this mount is gone when it exits.
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			fmt.Print("mount: ", err)
			os.Exit(0)
		}
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			fmt.Print("mount: ", err)
			os.Exit(0)
		}
	}
	fmt.Print(childFuncs[name](args))
	os.Exit(0)
}

type childSpec struct {
	name     string
	args     []string
	uid      int    // run as this uid and gid; 0 runs as the test does
	binDir   string // with uid: a directory the uid can read, for a copy of the test binary
	readOnly string // bind-mount this directory read-only in a private mount namespace first
}

var copiedBinaries sync.Map // binDir -> path of the copy

// runChild runs a child function and returns what it printed.
func runChild(t *testing.T, spec childSpec) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if spec.uid != 0 {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run a process as another user")
		}
		// The test binary's own directory is private to root.
		copied, ok := copiedBinaries.Load(spec.binDir)
		if !ok {
			data, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			copied = filepath.Join(spec.binDir, "child.test")
			if err := os.WriteFile(copied.(string), data, 0o755); err != nil {
				t.Fatal(err)
			}
			copiedBinaries.Store(spec.binDir, copied)
			t.Cleanup(func() { copiedBinaries.Delete(spec.binDir) })
		}
		bin = copied.(string)
	}
	args, _ := json.Marshal(spec.args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(childEnv(), envChild+"="+spec.name, envChildArgs+"="+string(args))
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if spec.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(spec.uid), Gid: uint32(spec.uid)}
	}
	if spec.readOnly != "" {
		cmd.Env = append(cmd.Env, envChildRO+"="+spec.readOnly)
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\n%s%s", spec.name, err, out, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// childNewPlugin creates an instance in the handover root args[0] and says
// whether that worked.
func childNewPlugin(args []string) string {
	p := &audit.Plugin{Version: "2.0.0", Recorder: &recorder{l: sim.NewLedger()}}
	_, err := plugin.New(p, plugin.WithVersion("2.0.0"), plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"),
		plugin.WithHandoverDir(args[0]), plugin.WithInstanceID("child"))
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// childCall connects to the handover socket args[0] and makes the calls
// named by the other arguments: "status", or "yield" (with a well-formed
// taker of plugin audit). It prints what happened.
func childCall(args []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := protocol.Dial(ctx, args[0])
	if err != nil {
		return "dial: " + err.Error()
	}
	defer cl.Close()
	var res []string
	for _, call := range args[1:] {
		switch call {
		case "status":
			if st, err := cl.Status(ctx, &hapi.StatusRequest{}); err != nil {
				res = append(res, "status: "+err.Error())
			} else {
				res = append(res, "status: answered "+st.String())
			}
		case "yield":
			taker := &hapi.Instance{Plugin: "audit", Id: "intruder", Version: "9.0.0", StartedUnixNano: time.Now().UnixNano()}
			if y, err := cl.Yield(ctx, &hapi.YieldRequest{Taker: taker}); err != nil {
				res = append(res, "yield: "+err.Error())
			} else {
				res = append(res, fmt.Sprintf("yield: answered, accepted %v", y.Accepted))
			}
		}
	}
	return strings.Join(res, "; ")
}

// TestHandoverSocketAccess: the handover directory, the instance socket and
// the owner name are private to the user, and a process of another user
// (uid 65534) gets nothing: the file modes refuse its connection, and with
// the modes opened up the handshake refuses every call. The owner stays
// owner; the same calls from this user work.
func TestHandoverSocketAccess(t *testing.T) {
	n := newNode(t)
	a := n.start("a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	dir := filepath.Join(n.root, "audit")
	sock := filepath.Join(dir, "instances", "a.sock")
	modes := map[string]os.FileMode{
		n.root:                           os.ModeDir | 0o700,
		dir:                              os.ModeDir | 0o700,
		filepath.Join(dir, "instances"):  os.ModeDir | 0o700,
		sock:                             os.ModeSocket | 0o600,
		filepath.Join(dir, "owner.sock"): os.ModeSocket | 0o600,
		filepath.Join(dir, "stamp.key"):  0o600,
	}
	for path, want := range modes {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() & (os.ModeType | os.ModePerm); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	if !sameFile(t, sock, filepath.Join(dir, "owner.sock")) {
		t.Fatal("owner.sock is not a link to the owner's socket")
	}

	// The same user: answered (only Status: a Yield from the same user
	// would be obeyed, by design).
	if out := childCall([]string{sock, "status"}); !strings.HasPrefix(out, "status: answered") {
		t.Fatalf("same user: %s", out)
	}

	parent := testutil.ShortTempDir(t, "nha-")
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := childSpec{name: "call", args: []string{sock, "status", "yield"}, uid: 65534, binDir: parent}
	out := runChild(t, spec)
	if !strings.HasPrefix(out, "dial: ") || !strings.Contains(out, "permission denied") {
		t.Errorf("uid 65534, private modes: %q, want the connection refused (permission denied)", out)
	}

	// Open the modes up (and restore them): the handshake still refuses.
	opened := map[string]os.FileMode{n.root: 0o711, dir: 0o711, filepath.Join(dir, "instances"): 0o711, sock: 0o666}
	for path, mode := range opened {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	out = runChild(t, spec)
	for path, want := range modes {
		if _, ok := opened[path]; ok {
			if err := os.Chmod(path, want.Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("uid 65534 with the modes opened: %s", out)
	if strings.HasPrefix(out, "dial: ") || strings.Contains(out, "answered") ||
		!strings.Contains(out, "status: ") || !strings.Contains(out, "yield: ") {
		t.Errorf("uid 65534, modes opened: %q, want the connection made and both calls refused", out)
	}
	if st := a.p.Status(); st.Role != handover.RoleOwner || len(st.Watchers) != 0 || st.LastHandover != nil {
		t.Errorf("the owner was disturbed: %v", st)
	}
	n.lifecycles(2)
	n.check()
}

// keyState is what must never change about the stamp key file.
type keyState struct {
	ino     uint64
	mode    os.FileMode
	content []byte
}

// readKeyState reads the key file's inode, mode and content.
func readKeyState(t *testing.T, path string) keyState {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return keyState{ino: fi.Sys().(*syscall.Stat_t).Ino, mode: fi.Mode(), content: b}
}

// TestStampKeyNeverReplaced: the first instance creates the key (0600, 32
// bytes); handovers, stops, restarts with the same id and instances of other
// versions leave the file as it is (same inode, same content). A key file
// that others may read, or of the wrong size, is refused at start and left
// untouched.
func TestStampKeyNeverReplaced(t *testing.T) {
	n := newNode(t)
	path := filepath.Join(n.root, "audit", "stamp.key")
	a := n.start("a", "1.0.0")
	waitRole(t, a, handover.RoleOwner)
	first := readKeyState(t, path)
	if first.mode != 0o600 || len(first.content) != stamp.KeySize {
		t.Fatalf("key: mode %v, %d bytes; want 0600, %d", first.mode, len(first.content), stamp.KeySize)
	}
	check := func(when string) {
		t.Helper()
		if got := readKeyState(t, path); got.ino != first.ino || got.mode != first.mode || !bytes.Equal(got.content, first.content) {
			t.Fatalf("%s: key file changed: inode %d -> %d, mode %v -> %v, content changed %v",
				when, first.ino, got.ino, first.mode, got.mode, !bytes.Equal(got.content, first.content))
		}
	}
	n.lifecycles(1)
	prev := a
	for i, v := range []string{"2.0.0", "1.0.0", "3.0.0", "3.0.0"} {
		r := n.start(fmt.Sprintf("i%d", i), v)
		waitRole(t, r, handover.RoleOwner)
		check("after instance " + r.p.Instance().ID + " took over")
		n.lifecycles(1)
		prev.stop(t)
		check("after " + prev.p.Instance().ID + " stopped")
		prev = r
	}
	prev.stop(t)
	again := n.start("a", "1.0.0") // the first id again, alone on the node
	waitRole(t, again, handover.RoleOwner)
	check("after a restart of the first instance")
	n.lifecycles(1)
	n.check()
	again.stop(t)

	for _, tc := range []struct {
		name  string
		apply func() error
		want  string
	}{
		{"readable by others", func() error { return os.Chmod(path, 0o644) }, "has mode 0644, group/other access is not allowed"},
		{"truncated", func() error { return os.Truncate(path, 5) }, "is 5 bytes, want 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := readKeyState(t, path)
			if err := tc.apply(); err != nil {
				t.Fatal(err)
			}
			bad := readKeyState(t, path)
			p := &audit.Plugin{Version: "1.0.0", Recorder: &recorder{l: n.ledger}}
			_, err := plugin.New(p, plugin.WithVersion("1.0.0"), plugin.WithPluginName("audit"), plugin.WithPluginIdx("10"),
				plugin.WithHandoverDir(n.root), plugin.WithInstanceID("k"))
			if err == nil || !strings.Contains(err.Error(), "stamp key: "+path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("start with a key file %s: %v, want an error naming %s and %q", tc.name, err, path, tc.want)
			}
			if got := readKeyState(t, path); got.ino != bad.ino || !bytes.Equal(got.content, bad.content) || got.mode != bad.mode {
				t.Error("the refused instance touched the key file")
			}
			// Put the key back as it was, for the next case.
			if err := os.WriteFile(path, orig.content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// logHook keeps the log entries that carry a message.
type logHook struct {
	mu      sync.Mutex
	entries []*logrus.Entry
}

func (h *logHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *logHook) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = append(h.entries, e)
	return nil
}

// invalidStamps returns the containers the log reports an ignored stamp
// of, in order.
func (h *logHook) invalidStamps() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, e := range h.entries {
		if e.Message == "ignoring invalid stamp" && e.Level == logrus.WarnLevel {
			ids = append(ids, fmt.Sprint(e.Data["container"]))
		}
	}
	return ids
}

// TestInvalidStampsAreIgnoredLoggedCounted: stamps that do not verify —
// a bad MAC, a valid stamp copied from another container, one signed with
// another node's key, a malformed value — never make the plugin skip a
// container. In Synchronize such containers go to the author as if
// unstamped; on CreateContainer the owner acts and replaces the stamp with
// its own. Each is logged with the container's id and counted in
// Stats().BadStamps and nri_handover_invalid_stamps_total.
func TestInvalidStampsAreIgnoredLoggedCounted(t *testing.T) {
	n := newNode(t)
	hook := &logHook{}
	n.log.AddHook(hook)
	n.log.SetLevel(logrus.InfoLevel)
	ctx := context.Background()
	key, err := stamp.AnnotationKey("audit")
	if err != nil {
		t.Fatal(err)
	}
	var otherKey stamp.Key
	otherKey[0] = 1
	otherNode, err := stamp.NewSigner("audit", otherKey)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := stamp.ParseVersion("1.0.0")
	bad := map[string]func(ctrID string) string{
		"bad MAC": func(string) string { return "v1;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA" },
		"other node's key": func(id string) string {
			v, _ := otherNode.Sign(id, v1, "a")
			return v
		},
		"malformed": func(string) string { return "v1;1.0.0;a" },
	}
	names := []string{"bad MAC", "malformed", "other node's key"}

	// Containers created while no instance runs keep their bad stamps:
	// the first instance's Synchronize sees them. (Their events reached no
	// instance: they are left out of the ledger check.)
	pod, err := n.rt.RunPod(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var early []string
	for _, name := range names {
		c, err := n.rt.CreateContainer(ctx, pod.Id, "pre-"+name, map[string]string{key: bad[name]("unknown")})
		if err != nil {
			t.Fatal(err)
		}
		early = append(early, c.Id)
	}
	sort.Strings(early)
	unattended := n.rt.Issued()
	author := newSyncAuthor(n, "a", "1.0.0")
	a := n.startAuthor("a", "1.0.0", author)
	waitRole(t, a, handover.RoleOwner)
	if got := <-author.synced; fmt.Sprint(got) != fmt.Sprint(early) {
		t.Errorf("Synchronize handed %v to the author, want the containers with invalid stamps %v", got, early)
	}

	// On CreateContainer, under the owner. The copied stamp is valid for
	// the container it was made for, not for this one.
	signer := n.signer()
	bad["copied from another container"] = func(string) string {
		v, _ := signer.Sign("ctr-elsewhere", v1, "a")
		return v
	}
	names = append(names, "copied from another container")
	var late []string
	for _, name := range names {
		c, err := n.rt.CreateContainer(ctx, pod.Id, "late-"+name, map[string]string{key: bad[name]("unknown")})
		if err != nil {
			t.Fatalf("%s: creation failed: %v", name, err)
		}
		late = append(late, c.Id)
		if acted := n.ledger.Acted(sim.EventCreateContainer, c.Id); len(acted) != 1 {
			t.Errorf("%s: acted on by %v, want the owner once", name, acted)
		}
		if st, err := signer.Verify(c.Id, c.Annotations); err != nil || st.Instance != "a" {
			t.Errorf("%s: the stamp was not replaced by the owner's: %v %v", name, st, err)
		}
	}
	want := len(early) + len(late)
	if st := a.p.Stats(); st.BadStamps != uint64(want) || st.SkippedStamped != 0 {
		t.Errorf("stats %+v, want %d bad stamps and no container skipped", st, want)
	}
	srv := httptest.NewServer(metrics.Handler(a.p))
	defer srv.Close()
	if got := value(scrape(t, srv.URL), "nri_handover_invalid_stamps_total", nil); got != float64(want) {
		t.Errorf("nri_handover_invalid_stamps_total = %v, want %d", got, want)
	}
	logged := hook.invalidStamps()
	if fmt.Sprint(logged) != fmt.Sprint(append(append([]string{}, early...), late...)) {
		t.Errorf("logged invalid stamps of %v, want %v then %v", logged, early, late)
	}
	if err := n.rt.RemovePod(ctx, pod.Id); err != nil {
		t.Fatal(err)
	}
	n.checkSince(unattended)
}
