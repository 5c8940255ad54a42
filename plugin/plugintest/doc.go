// Package plugintest is a test kit for NRI plugins built on the
// nri-handover harness (package plugin), as net/http/httptest is for
// net/http: it runs, inside the test process, an NRI runtime built on
// github.com/containerd/nri/pkg/adaptation (the code containerd and CRI-O
// embed), and instances of the author's own plugin connected to it over a
// real NRI socket; it upgrades, rolls back, crashes and freezes those
// instances while pods and containers go through their lifecycles, and
// checks that every event reached the author's handlers exactly once and
// that every container carries one valid stamp.
//
// # The runtime
//
// A Runtime listens on a real NRI unix socket, keeps a model of pods and
// containers, and drives their lifecycles through the adaptation the way
// containerd does:
//
//   - events are serialized by a runtime lock (containerd's and CRI-O's NRI
//     wrappers have one too) and by the adaptation's own lock, and no event
//     runs during a plugin's Synchronize call;
//   - in ModeContainerd (the default) every operation that sends NRI events
//     holds a plugin-sync block (Adaptation.BlockPluginSync) for its whole
//     duration; the other modes (ModeCRIO, ModeGap, ModeExitStop) play the
//     runtimes and paths that do not, see Mode;
//   - adjustments from CreateContainer are applied to the stored container,
//     so later events and later Synchronize calls show them;
//   - a CreateContainer the adaptation rejects is undone with StopContainer
//     and RemoveContainer events for the original, unadjusted container;
//   - updates returned by plugins (in CreateContainer, UpdateContainer,
//     StopContainer, Synchronize and unsolicited UpdateContainers) are
//     applied to the stored containers' resources.
//
// # The node
//
// A Node is a Runtime, a handover directory and the instances of one
// plugin: Start, Upgrade and Rollback start instances of the author's
// plugin at given versions (from the author's constructor); Instance.Stop
// stops one as the kubelet does (a clean handover), Instance.Crash as
// SIGKILL would (no handover), Instance.Freeze and Thaw as SIGSTOP and
// SIGCONT would. The Node wraps the author's handlers to keep a Ledger of
// which instance acted on which event, so Check and Verify need nothing
// from the author's plugin.
//
// # What the ledger sees
//
// A handler call is recorded when it begins, with the instance and its
// version; the Node subscribes each instance to exactly the events the
// author's plugin would subscribe to alone (its handlers, narrowed by its
// own Configure). CreateContainer is recorded for every container an
// instance acts on, whether or not the author has a handler for it: the
// harness stamps it. Check compares, per event kind every instance
// subscribed to, the calls with the events the runtime delivered, and
// verifies each created container's stamp against the instance whose
// handler saw its CreateContainer. ValidateContainerAdjustment is recorded
// and compared like the other events (the runtime counts it once per
// CreateContainer in which validators were asked); Shutdown is recorded
// (EventShutdown) but never compared, since the kit's runtime, like
// containerd/nri's adaptation it runs, never sends it. Synchronize and
// Reconcile are passed on but not recorded.
//
// Crash and Freeze act inside the test process: the harness passes the
// instance's runtime connections through the Node (which can cut or freeze
// them), and the harness and the handover service consult a hook that no
// production binary registers.
package plugintest
