package plugin

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nri-handover/nri-handover/handover"
	hapi "github.com/nri-handover/nri-handover/internal/protocol/api"
)

// shutdowner is a plugin with only a Shutdown handler.
type shutdowner struct{ calls int }

func (s *shutdowner) Shutdown(context.Context) { s.calls++ }

// TestShutdownOnlyOnTheOwner: a plugin with only a Shutdown handler can be
// built; Shutdown reaches it on the owner only, and never through a
// connection the harness closed.
func TestShutdownOnlyOnTheOwner(t *testing.T) {
	author := &shutdowner{}
	p, err := New(author, WithVersion("1.0.0"), WithPluginName("shut"), WithPluginIdx("10"),
		WithHandoverDir(fzRoot(t)), WithInstanceID("a"), WithLogger(fzLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a := &adapter{p: p, tag: p.coord.Conn(0)}
	a.Shutdown(context.Background())
	if author.calls != 0 {
		t.Fatalf("Shutdown reached the author of a %v instance", p.Role())
	}
	if role, err := p.coord.ClaimConn(context.Background(), a.tag, nil, nil); err != nil || role != hapi.Role_ROLE_OWNER {
		t.Fatalf("claim: %v %v", role, err)
	}
	// The runtime calls the connection for an event: it is in the chain
	// and acts from now on.
	if !p.coord.Decide(a.tag, 1, 1, nil).Act {
		t.Fatal("the only instance's connection does not act on its first event")
	}
	a.Shutdown(context.Background())
	if author.calls != 1 {
		t.Fatalf("Shutdown reached the owner's author %d times, want 1", author.calls)
	}
	a.closed.Store(true)
	a.Shutdown(context.Background())
	if author.calls != 1 {
		t.Fatal("Shutdown reached the author through a closed connection")
	}
}

// TestInstanceAndStatusValues: Instance and Status are plain values that
// say who the instance is and what it is doing, and what a caller does with
// them changes nothing in the plugin.
func TestInstanceAndStatusValues(t *testing.T) {
	before := time.Now()
	p, err := New(&shutdowner{}, WithVersion("1.0.0"), WithPluginName("copies"), WithPluginIdx("10"),
		WithHandoverDir(fzRoot(t)), WithInstanceID("a"), WithLogger(fzLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	in := p.Instance()
	if in.Plugin != "copies" || in.ID != "a" || in.Version != "1.0.0" || in.PID != os.Getpid() ||
		in.Started.Before(before.Add(-time.Second)) || in.Started.After(time.Now()) {
		t.Fatalf("Instance() = %+v", in)
	}
	st := p.Status()
	if st.Role != handover.RoleJoining || st.Instance != in || st.LastHandover != nil || st.Leaving {
		t.Fatalf("Status() of a new instance = %+v", st)
	}
	if role, err := p.coord.Claim(context.Background()); err != nil || role != hapi.Role_ROLE_OWNER {
		t.Fatalf("claim: %v %v", role, err)
	}
	st.Role, st.Instance.Version = handover.RoleStandby, "9.9.9"
	if got := p.Status(); got.Role != handover.RoleOwner || got.Epoch != 1 || got.Instance.Version != "1.0.0" ||
		got.Reason != "no owner on the node" || p.Role() != handover.RoleOwner {
		t.Fatalf("Status() of the first owner = %+v, Role() %v", got, p.Role())
	}
}
