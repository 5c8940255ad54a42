package protocol

import (
	"context"
	"time"

	"github.com/nri-handover/nri-handover/internal/protocol/api"
)

// LiveFallback reports whether the instance whose status is st is a live
// fallback: it is retired because it yielded to a successor (not because it
// is stopping), and that successor now answers on the owner name of d as
// owner. Such an instance takes ownership back if its successor dies, so a
// DaemonSet should keep its pod (Ready) until the successor's pod has been
// available for minReadySeconds. It returns the successor's id.
func LiveFallback(ctx context.Context, d *Dir, st *api.StatusResponse) (string, bool) {
	h := st.GetLastHandover()
	if st.GetRole() != api.Role_ROLE_RETIRED || st.GetLeaving() ||
		h.GetFromId() != st.GetInstance().GetId() || h.GetToId() == "" {
		return "", false
	}
	cl, err := Dial(ctx, d.OwnerSocket())
	if err != nil {
		return "", false
	}
	defer cl.Close()
	owner, err := cl.Status(ctx, &api.StatusRequest{})
	if err != nil || owner.GetRole() != api.Role_ROLE_OWNER || owner.GetInstance().GetId() != h.GetToId() {
		return "", false
	}
	return h.GetToId(), true
}

// fallbackProbeTimeout bounds the owner query of Ready.
const fallbackProbeTimeout = time.Second

// FallbackReason is the readiness reason of a live fallback.
func FallbackReason(successor string) string {
	return "retired: live fallback for owner " + successor
}
