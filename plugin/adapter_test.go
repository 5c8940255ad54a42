package plugin

import (
	"context"
	"testing"
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
	if role, err := p.coord.ClaimConn(context.Background(), a.tag, nil); err != nil || role != RoleOwner {
		t.Fatalf("claim: %v %v", role, err)
	}
	// The runtime calls the connection for an event: it is in the chain
	// and acts from now on.
	if !p.coord.Decide(a.tag, 1, 1).Act {
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

// TestInstanceAndStatusAreCopies: what Instance and Status return is the
// caller's; changing it changes nothing in the plugin.
func TestInstanceAndStatusAreCopies(t *testing.T) {
	p, err := New(&shutdowner{}, WithVersion("1.0.0"), WithPluginName("copies"), WithPluginIdx("10"),
		WithHandoverDir(fzRoot(t)), WithInstanceID("a"), WithLogger(fzLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Instance().Id = "changed"
	st := p.Status()
	st.Role, st.Instance.Version = RoleOwner, "9.9.9"
	if p.Instance().Id != "a" || p.Status().Role != RoleJoining || p.Status().Instance.Version != "1.0.0" {
		t.Fatalf("the plugin changed with its copies: %v %v", p.Instance(), p.Status())
	}
}
