package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
)

// Paths and commands the plugins, the harness and the probes agree on.
const (
	nriSocketDir    = "/var/run/nri"
	handoverDir     = "/var/run/nri-handover"
	auditLedgerDir  = "/var/log/nri-audit"
	probeBinary     = "nri-handover"
	minGraceSeconds = 20 // the harness's leave timeout is 10 s
)

var policies = []string{"newest-instance", "newest-version"}

// chartCase is one way of installing the chart, and what it must produce.
type chartCase struct {
	name       string
	release    string
	namespace  string
	valuesFile string         // under the chart directory; "" for the defaults
	set        map[string]any // on top of valuesFile, as --set would
	want       want
}

// want is what a DaemonSet must run.
type want struct {
	plugin      string // NRI plugin name
	index       string
	binary      string
	image       string
	policy      string
	ledger      bool  // mounts the audit ledger directory and passes -ledger
	metricsPort int32 // 0: metrics disabled
	extraArgs   []string
}

var chartCases = []chartCase{
	{
		name: "defaults", release: "nri-audit", namespace: "nri-handover",
		want: want{plugin: "audit", index: "10", binary: "nri-audit", image: "ghcr.io/nri-handover/nri-audit:1.0.0",
			policy: "newest-instance", ledger: true},
	},
	{
		name: "versioned", release: "nri-versioned", namespace: "nri-handover",
		valuesFile: "ci/versioned-values.yaml",
		want: want{plugin: "versioned", index: "20", binary: "nri-versioned", image: "ghcr.io/nri-handover/nri-versioned:1.0.0",
			policy: "newest-instance"},
	},
	{
		name: "newest-version", release: "audit", namespace: "kube-system",
		valuesFile: "ci/newest-version-values.yaml",
		want: want{plugin: "audit", index: "10", binary: "nri-audit", image: "ghcr.io/nri-handover/nri-audit:1.0.0",
			policy: "newest-version", ledger: true},
	},
	{
		name: "metrics", release: "nri-audit", namespace: "nri-handover",
		valuesFile: "ci/metrics-values.yaml",
		want: want{plugin: "audit", index: "10", binary: "nri-audit", image: "ghcr.io/nri-handover/nri-audit:2.0.0",
			policy: "newest-instance", ledger: true, metricsPort: 9102, extraArgs: []string{"-version=2.0.0", "-debug"}},
	},
	{
		name: "versioned newest-version metrics", release: "plugins", namespace: "nri-handover",
		valuesFile: "ci/versioned-values.yaml",
		set:        map[string]any{"policy": "newest-version", "metrics": map[string]any{"enabled": true}},
		want: want{plugin: "versioned", index: "20", binary: "nri-versioned", image: "ghcr.io/nri-handover/nri-versioned:1.0.0",
			policy: "newest-version", metricsPort: 9090},
	},
}

// values returns the case's values: its file, then set on top.
func (c chartCase) values(t *testing.T) map[string]any {
	t.Helper()
	vals := chartValues(t, c.valuesFile)
	if c.set != nil {
		vals = chartutil.CoalesceTables(deepCopy(c.set), vals)
	}
	return vals
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		out[k] = v
	}
	return out
}

// manifestWants says what each shipped manifest must run.
var manifestWants = map[string]want{
	"audit.yaml": {plugin: "audit", index: "10", binary: "nri-audit", image: "ghcr.io/nri-handover/nri-audit:1.0.0",
		policy: "newest-instance", ledger: true},
	"versioned.yaml": {plugin: "versioned", index: "20", binary: "nri-versioned", image: "ghcr.io/nri-handover/nri-versioned:1.0.0",
		policy: "newest-instance"},
}

// TestManifestsDecodeStrictly decodes every manifest under manifests/ into
// the k8s.io/api types with unknown fields and duplicate keys rejected, and
// checks that the objects of a file belong together.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, path := range manifestFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			objs := loadManifest(t, path)
			if len(objs.namespaces) != 1 {
				t.Errorf("%d Namespaces, want 1 (the manifests are applied as they are)", len(objs.namespaces))
			}
			if len(objs.daemonSets) != 1 {
				t.Fatalf("%d DaemonSets, want 1", len(objs.daemonSets))
			}
			checkObjectSet(t, objs)
			if _, ok := manifestWants[filepath.Base(path)]; !ok {
				t.Errorf("no expectations for %s in manifestWants", path)
			}
		})
	}
}

// TestChartRendersStrictly renders the chart with its defaults and with each
// value set of chartCases (the versioned plugin, the newest-version policy,
// metrics), and decodes the output strictly.
func TestChartRendersStrictly(t *testing.T) {
	ch := loadChart(t)
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			objs, out, err := renderObjects(ch, c.release, c.namespace, c.values(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(objs.daemonSets) != 1 || len(objs.serviceAccounts) != 1 || len(objs.namespaces) != 0 {
				t.Fatalf("rendered %d DaemonSets, %d ServiceAccounts, %d Namespaces; want 1, 1, 0 (helm owns the namespace)",
					len(objs.daemonSets), len(objs.serviceAccounts), len(objs.namespaces))
			}
			checkObjectSet(t, objs)
			ds := objs.daemonSets[0]
			if ds.Namespace != c.namespace {
				t.Errorf("DaemonSet namespace %q, want the release's %q", ds.Namespace, c.namespace)
			}
			if !strings.Contains(ds.Name, "nri-"+c.want.plugin) {
				t.Errorf("DaemonSet name %q does not name the plugin", ds.Name)
			}
			notes := out["nri-handover-plugin/templates/NOTES.txt"]
			if !strings.Contains(notes, "rollout status ds/"+ds.Name) {
				t.Errorf("NOTES.txt does not show how to watch ds/%s:\n%s", ds.Name, notes)
			}
		})
	}
}

// TestChartValueFilesCovered makes sure every ci/*-values.yaml file is one
// of the rendered cases.
func TestChartValueFilesCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(chartDir, f)
		if !slices.ContainsFunc(chartCases, func(c chartCase) bool { return c.valuesFile == rel }) {
			t.Errorf("%s is not rendered by any chartCase", rel)
		}
	}
}

// TestDaemonSets checks every DaemonSet, from the manifests and from each
// chart rendering, for what a zero-downtime handover needs.
func TestDaemonSets(t *testing.T) {
	for _, path := range manifestFiles(t) {
		w, ok := manifestWants[filepath.Base(path)]
		if !ok {
			continue // reported by TestManifestsDecodeStrictly
		}
		t.Run("manifest "+filepath.Base(path), func(t *testing.T) {
			objs := loadManifest(t, path)
			for _, ds := range objs.daemonSets {
				checkDaemonSet(t, &ds, w)
			}
		})
	}
	ch := loadChart(t)
	for _, c := range chartCases {
		t.Run("chart "+c.name, func(t *testing.T) {
			objs, _, err := renderObjects(ch, c.release, c.namespace, c.values(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, ds := range objs.daemonSets {
				checkDaemonSet(t, &ds, c.want)
			}
		})
	}
}

// TestManifestsMatchChart keeps the plain manifests and the chart in step:
// each manifest's DaemonSet spec (pod template labels aside, which carry
// helm's) is what the chart renders for the same plugin.
func TestManifestsMatchChart(t *testing.T) {
	ch := loadChart(t)
	for file, c := range map[string]chartCase{"audit.yaml": chartCases[0], "versioned.yaml": chartCases[1]} {
		t.Run(file, func(t *testing.T) {
			m := loadManifest(t, filepath.Join(manifestsDir, file))
			r, _, err := renderObjects(ch, c.release, c.namespace, c.values(t))
			if err != nil {
				t.Fatal(err)
			}
			md, rd := m.daemonSets[0], r.daemonSets[0]
			if md.Name != rd.Name || md.Namespace != rd.Namespace {
				t.Errorf("manifest DaemonSet %s/%s, chart renders %s/%s", md.Namespace, md.Name, rd.Namespace, rd.Name)
			}
			md.Spec.Template.Labels, rd.Spec.Template.Labels = nil, nil
			if !equality.Semantic.DeepEqual(md.Spec, rd.Spec) {
				t.Errorf("%s and the chart differ (- manifest, + chart):\n%s", file, diff.Diff(md.Spec, rd.Spec))
			}
			ms, rs := m.serviceAccounts[0], r.serviceAccounts[0]
			if ms.Name != rs.Name || !equality.Semantic.DeepEqual(ms.AutomountServiceAccountToken, rs.AutomountServiceAccountToken) {
				t.Errorf("ServiceAccounts differ: manifest %s, chart %s", ms.Name, rs.Name)
			}
		})
	}
}

// TestChartRejectsInvalidValues: values the pods could not run with fail
// the rendering (so helm install/upgrade) with a message naming the value.
func TestChartRejectsInvalidValues(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		set, setString string // as helm's --set and --set-string
		want           string
	}{
		{set: "policy=newest", want: `policy "newest" is not a handover policy: use newest-instance`},
		{set: "policy=oldest-version", want: `policy "oldest-version" is not a handover policy`},
		{set: "policy=Newest-Version", want: `policy "Newest-Version" is not a handover policy`},
		{set: "policy=null", want: `is not a handover policy`},
		{set: "plugin.index=5", want: `plugin.index "5": want two digits`},
		{setString: "plugin.index=100", want: `plugin.index "100": want two digits`},
		{set: "plugin.name=Audit_Plugin", want: `plugin.name "Audit_Plugin": want a lowercase DNS label`},
		{set: "plugin.binary=", want: `plugin.binary: name the plugin binary`},
		{set: "terminationGracePeriodSeconds=5", want: `terminationGracePeriodSeconds 5: must exceed the 10 s`},
		{set: "metrics.enabled=true,metrics.port=0", want: `metrics.port 0: want 1-65535`},
		{set: "handoverDir=var/run/nri-handover", want: `handoverDir "var/run/nri-handover": want an absolute path`},
		{set: "nriSocketDir=", want: `nriSocketDir "": want an absolute path`},
		{set: "ledger.hostDir=nri-audit", want: `ledger.hostDir "nri-audit": want an absolute path`},
	} {
		t.Run(tc.set+tc.setString, func(t *testing.T) {
			vals := map[string]any{}
			if tc.set != "" {
				if err := strvals.ParseInto(tc.set, vals); err != nil {
					t.Fatal(err)
				}
			}
			if tc.setString != "" {
				if err := strvals.ParseIntoString(tc.setString, vals); err != nil {
					t.Fatal(err)
				}
			}
			_, err := render(ch, "nri-audit", "nri-handover", vals)
			if err == nil {
				t.Fatalf("rendering with %s succeeded, want an error containing %q", tc.set+tc.setString, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	// The same values, valid, render: the checks above fail for the value,
	// not for the way it was given.
	for _, set := range []string{
		"policy=newest-version", "policy=newest-instance", "terminationGracePeriodSeconds=11",
		"metrics.enabled=true,metrics.port=65535", "ledger.enabled=false,ledger.hostDir=",
	} {
		vals := map[string]any{}
		if err := strvals.ParseInto(set, vals); err != nil {
			t.Fatal(err)
		}
		if _, err := render(ch, "nri-audit", "nri-handover", vals); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
	vals := map[string]any{}
	if err := strvals.ParseIntoString("plugin.index=05", vals); err != nil {
		t.Fatal(err)
	}
	if _, err := render(ch, "nri-audit", "nri-handover", vals); err != nil {
		t.Errorf("--set-string plugin.index=05: %v", err)
	}
}

// TestStrictDecodingRejects proves the strict decoding above has teeth: a
// misspelt field, a duplicate key or an unknown kind in a manifest fails.
func TestStrictDecodingRejects(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(manifestsDir, "audit.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	for name, mutate := range map[string]func(string) string{
		"misspelt field": func(s string) string {
			return strings.Replace(s, "readinessProbe:", "readinesProbe:", 1)
		},
		"field at the wrong level": func(s string) string {
			return strings.Replace(s, "  minReadySeconds: 5\n", "  minReadySeconds: 5\n  maxSurge: 1\n", 1)
		},
		"duplicate key": func(s string) string {
			return strings.Replace(s, "      priorityClassName: system-node-critical\n",
				"      priorityClassName: system-node-critical\n      priorityClassName: system-cluster-critical\n", 1)
		},
		"wrong type": func(s string) string {
			return strings.Replace(s, "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: thirty", 1)
		},
		"unknown kind": func(s string) string {
			return s + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
		},
	} {
		t.Run(name, func(t *testing.T) {
			mutated := mutate(src)
			if mutated == src {
				t.Fatal("mutation did not apply: update the test")
			}
			if _, err := decodeStrict("mutated audit.yaml", []byte(mutated)); err == nil {
				t.Fatal("decoded without error")
			}
		})
	}
}

// checkObjectSet checks that the objects of one file or rendering fit
// together: one namespace, the DaemonSet's service account among them, a
// selector that selects the pod template.
func checkObjectSet(t *testing.T, objs *objects) {
	t.Helper()
	namespaces := map[string]bool{}
	for _, sa := range objs.serviceAccounts {
		namespaces[sa.Namespace] = true
		if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("%s: ServiceAccount %s mounts its token; the plugin never calls the API server", objs.source, sa.Name)
		}
	}
	for _, ds := range objs.daemonSets {
		namespaces[ds.Namespace] = true
		sa := ds.Spec.Template.Spec.ServiceAccountName
		if !slices.ContainsFunc(objs.serviceAccounts, func(o corev1.ServiceAccount) bool {
			return o.Name == sa && o.Namespace == ds.Namespace
		}) {
			t.Errorf("%s: DaemonSet %s runs as ServiceAccount %q, which is not defined beside it", objs.source, ds.Name, sa)
		}
		sel := ds.Spec.Selector
		if sel == nil || len(sel.MatchLabels) == 0 {
			t.Errorf("%s: DaemonSet %s has no selector", objs.source, ds.Name)
			continue
		}
		if len(sel.MatchExpressions) != 0 {
			t.Errorf("%s: DaemonSet %s: unexpected matchExpressions", objs.source, ds.Name)
		}
		for k, v := range sel.MatchLabels {
			if ds.Spec.Template.Labels[k] != v {
				t.Errorf("%s: DaemonSet %s: selector %s=%s does not select its pod template", objs.source, ds.Name, k, v)
			}
		}
	}
	if len(namespaces) != 1 || namespaces[""] {
		t.Errorf("%s: objects in namespaces %v, want one, named", objs.source, namespaces)
	}
	for _, ns := range objs.namespaces {
		if !namespaces[ns.Name] {
			t.Errorf("%s: Namespace %s holds none of the objects (%v)", objs.source, ns.Name, namespaces)
		}
		// hostPath volumes are forbidden from the baseline level on.
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
			t.Errorf("%s: Namespace %s enforces Pod Security level %q; hostPath volumes need \"privileged\"", objs.source, ns.Name, got)
		}
	}
}

// checkDaemonSet checks one DaemonSet for what a zero-downtime handover
// needs, and that it runs the plugin w describes.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, w want) {
	t.Helper()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("DaemonSet %s: %s", ds.Name, fmt.Sprintf(format, args...))
	}

	// Rollout: surge one new pod per node, delete the old one only once the
	// new one is ready (owns the plugin) and has stayed so.
	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil {
		errorf("updateStrategy %+v, want RollingUpdate", us)
	} else {
		if !sameIntOrString(us.RollingUpdate.MaxSurge, intstr.FromInt32(1)) {
			errorf("maxSurge %v, want 1", us.RollingUpdate.MaxSurge)
		}
		if !sameIntOrString(us.RollingUpdate.MaxUnavailable, intstr.FromInt32(0)) {
			errorf("maxUnavailable %v, want 0 (with maxSurge, the old pod goes only once the new one is ready)", us.RollingUpdate.MaxUnavailable)
		}
	}
	if ds.Spec.MinReadySeconds <= 0 {
		errorf("minReadySeconds %d, want > 0", ds.Spec.MinReadySeconds)
	}

	pod := &ds.Spec.Template.Spec
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < minGraceSeconds {
		errorf("terminationGracePeriodSeconds %v, want >= %d (a stopping owner waits up to 10 s for a standby)", deref(g), minGraceSeconds)
	}
	if pod.PriorityClassName != "system-node-critical" {
		errorf("priorityClassName %q, want system-node-critical", pod.PriorityClassName)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" {
		errorf("nodeSelector %v, want kubernetes.io/os: linux", pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == "" && tol.TolerationSeconds == nil
	}) {
		errorf("tolerations %v: want {operator: Exists} to run on every node", pod.Tolerations)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		errorf("shares the host's network, PID or IPC namespace")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		errorf("mounts a service account token")
	}
	if len(pod.InitContainers) != 0 || len(pod.EphemeralContainers) != 0 {
		errorf("unexpected init or ephemeral containers")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("DaemonSet %s: %d containers, want 1", ds.Name, len(pod.Containers))
	}
	c := &pod.Containers[0]

	// What runs.
	if c.Image != w.image {
		errorf("image %q, want %q", c.Image, w.image)
	}
	if !slices.Equal(c.Command, []string{w.binary}) {
		errorf("command %q, want [%s]", c.Command, w.binary)
	}

	// Probes: ready only on the owner, alive in any role, never the same.
	checkProbe(t, ds.Name, "readinessProbe", c.ReadinessProbe, []string{probeBinary, "probe", "ready", "--plugin", w.plugin})
	checkProbe(t, ds.Name, "livenessProbe", c.LivenessProbe, []string{probeBinary, "probe", "live", "--plugin", w.plugin})
	if c.ReadinessProbe != nil && c.LivenessProbe != nil &&
		equality.Semantic.DeepEqual(c.ReadinessProbe.Exec, c.LivenessProbe.Exec) {
		errorf("liveness and readiness run the same command: a standby would be killed")
	}
	if p := c.LivenessProbe; p != nil {
		// How long an instance may not answer before it is killed.
		if patience := probeSeconds(p.PeriodSeconds, 10) * probeSeconds(p.FailureThreshold, 3); patience < 30 {
			errorf("livenessProbe kills after %d s without an answer, want >= 30", patience)
		}
		if p.FailureThreshold < 3 {
			errorf("livenessProbe failureThreshold %d, want a generous one (>= 3)", p.FailureThreshold)
		}
	}
	// The startup probe waits for the claim, so that readiness never sees
	// a joining instance; its --timeout stays below timeoutSeconds, and a
	// slow start is given time before the kubelet restarts it.
	checkProbe(t, ds.Name, "startupProbe", c.StartupProbe, []string{probeBinary, "probe", "started", "--plugin", w.plugin, "--timeout", "4s"})
	if p := c.StartupProbe; p != nil {
		if probeSeconds(p.TimeoutSeconds, 1) <= 4 {
			errorf("startupProbe timeoutSeconds %d, want more than the probe's --timeout 4s", p.TimeoutSeconds)
		}
		if budget := probeSeconds(p.PeriodSeconds, 10) * probeSeconds(p.FailureThreshold, 3); budget < 30 {
			errorf("startupProbe gives a start %d s, want >= 30", budget)
		}
	}

	// Environment: the instance is the pod, the plugin is registered as w says.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
	}
	if e, ok := env["NRI_HANDOVER_INSTANCE"]; !ok || e.Value != "" || e.ValueFrom == nil ||
		e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		errorf("NRI_HANDOVER_INSTANCE %+v, want valueFrom fieldRef metadata.name (the pod name)", e)
	}
	for name, value := range map[string]string{
		"NRI_PLUGIN_NAME":     w.plugin,
		"NRI_PLUGIN_IDX":      w.index,
		"NRI_HANDOVER_DIR":    handoverDir,
		"NRI_HANDOVER_POLICY": w.policy,
	} {
		if e, ok := env[name]; !ok || e.Value != value || e.ValueFrom != nil {
			errorf("env %s = %q, want %q", name, e.Value, value)
		}
	}
	if !slices.Contains(policies, env["NRI_HANDOVER_POLICY"].Value) {
		errorf("NRI_HANDOVER_POLICY %q is not a policy", env["NRI_HANDOVER_POLICY"].Value)
	}
	if !regexp.MustCompile(`^[0-9]{2}$`).MatchString(env["NRI_PLUGIN_IDX"].Value) {
		errorf("NRI_PLUGIN_IDX %q: want two digits", env["NRI_PLUGIN_IDX"].Value)
	}

	// Host paths: the NRI socket directory must exist (NRI enabled); the
	// handover and ledger directories are created if missing.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			errorf("volumeMount %s has no volume", m.Name)
		}
		if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
			errorf("volumeMount %s propagates mounts", m.Name)
		}
		mounts[m.MountPath] = m
	}
	wantHostPaths := map[string]corev1.HostPathType{
		nriSocketDir: corev1.HostPathDirectory,
		handoverDir:  corev1.HostPathDirectoryOrCreate,
	}
	if w.ledger {
		wantHostPaths[auditLedgerDir] = corev1.HostPathDirectoryOrCreate
	}
	hostPaths := 0
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths++
		}
	}
	if hostPaths != len(wantHostPaths) {
		errorf("%d hostPath volumes, want %d", hostPaths, len(wantHostPaths))
	}
	for path, typ := range wantHostPaths {
		m, ok := mounts[path]
		if !ok {
			errorf("nothing mounted at %s", path)
			continue
		}
		if m.ReadOnly || m.SubPath != "" || m.SubPathExpr != "" {
			errorf("mount at %s: read-only or sub-path; the plugin creates sockets and files in it", path)
		}
		hp := vols[m.Name].HostPath
		if hp == nil || hp.Path != path || hp.Type == nil || *hp.Type != typ {
			errorf("volume %s mounted at %s: hostPath %+v, want %s of type %s", m.Name, path, hp, path, typ)
		}
	}

	// Arguments: the socket inside the mounted directory, the ledger on the
	// host, metrics only when asked, extra arguments last.
	args := c.Args
	wantArgs := []string{"-nri-socket=" + nriSocketDir + "/nri.sock"}
	if w.ledger {
		wantArgs = append(wantArgs, "-ledger="+auditLedgerDir+"/ledger.log")
	}
	if w.metricsPort != 0 {
		wantArgs = append(wantArgs, fmt.Sprintf("-metrics-addr=:%d", w.metricsPort))
	}
	for _, a := range wantArgs {
		if !slices.Contains(args, a) {
			errorf("args %q lack %q", args, a)
		}
	}
	if w.metricsPort == 0 && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-metrics-addr") }) {
		errorf("args %q serve metrics, which are disabled", args)
	}
	if !containsInOrder(args, w.extraArgs) {
		errorf("args %q lack %q", args, w.extraArgs)
	}
	if w.metricsPort != 0 {
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != w.metricsPort || c.Ports[0].Name != "metrics" ||
			c.Ports[0].Protocol != corev1.ProtocolTCP || c.Ports[0].HostPort != 0 {
			errorf("ports %+v, want one TCP port \"metrics\" %d, not on the host", c.Ports, w.metricsPort)
		}
	} else if len(c.Ports) != 0 {
		errorf("ports %+v with metrics disabled", c.Ports)
	}

	// Resources: small, requested, memory limited.
	req, lim := c.Resources.Requests, c.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := req[r]; !ok || q.Sign() <= 0 {
			errorf("no %s request", r)
		}
	}
	if q, ok := lim[corev1.ResourceMemory]; !ok || q.Sign() <= 0 {
		errorf("no memory limit")
	} else if rq := req[corev1.ResourceMemory]; rq.Cmp(q) > 0 {
		errorf("memory request %s above its limit %s", rq.String(), q.String())
	}

	// Security: root only for the root-owned socket; nothing else.
	checkSecurity(t, ds.Name, pod, c)
}

func checkProbe(t *testing.T, ds, which string, p *corev1.Probe, want []string) {
	t.Helper()
	if p == nil {
		t.Errorf("DaemonSet %s: no %s", ds, which)
		return
	}
	if p.Exec == nil || p.HTTPGet != nil || p.TCPSocket != nil || p.GRPC != nil {
		t.Errorf("DaemonSet %s: %s is not an exec probe", ds, which)
		return
	}
	if !slices.Equal(p.Exec.Command, want) {
		t.Errorf("DaemonSet %s: %s runs %q, want %q", ds, which, p.Exec.Command, want)
	}
	if p.SuccessThreshold > 1 {
		t.Errorf("DaemonSet %s: %s successThreshold %d delays every handover", ds, which, p.SuccessThreshold)
	}
}

func checkSecurity(t *testing.T, ds string, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("DaemonSet %s: %s", ds, fmt.Sprintf(format, args...))
	}
	sc := c.SecurityContext
	if sc == nil {
		errorf("container has no securityContext")
		return
	}
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if sc.Privileged == nil || *sc.Privileged {
		errorf("privileged %v, want false", deref(sc.Privileged))
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		errorf("allowPrivilegeEscalation %v, want false", deref(sc.AllowPrivilegeEscalation))
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		errorf("readOnlyRootFilesystem %v, want true", deref(sc.ReadOnlyRootFilesystem))
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		errorf("capabilities %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	// Effective values: the container's, else the pod's.
	uid := sc.RunAsUser
	if uid == nil {
		uid = psc.RunAsUser
	}
	if uid == nil || *uid != 0 {
		errorf("runAsUser %v, want 0 (the NRI socket is owned by root)", deref(uid))
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errorf("seccompProfile %+v, want RuntimeDefault", seccomp)
	}
	if psc.SeccompProfile != nil && psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		errorf("pod seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		errorf("procMount %s", *sc.ProcMount)
	}
	if pod.HostUsers != nil && !*pod.HostUsers {
		// In a user namespace uid 0 is not the socket's owner.
		errorf("hostUsers false: uid 0 in a user namespace cannot connect to the NRI socket")
	}
}

func sameIntOrString(got *intstr.IntOrString, want intstr.IntOrString) bool {
	return got != nil && got.Type == want.Type && got.IntVal == want.IntVal && got.StrVal == want.StrVal
}

func probeSeconds(v, dflt int32) int32 {
	if v == 0 {
		return dflt
	}
	return v
}

// containsInOrder reports whether want appears in args as a subsequence.
func containsInOrder(args, want []string) bool {
	i := 0
	for _, a := range args {
		if i < len(want) && a == want[i] {
			i++
		}
	}
	return i == len(want)
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}
