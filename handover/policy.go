package handover

import (
	"fmt"

	"github.com/hashicorp/go-version"
)

// Policy decides whether a taker may take ownership from the current owner.
// A plugin sets its policy with plugin.WithPolicy; any type with these
// methods is one (the instances' versions are the plugin's own, as given
// by plugin.WithVersion or -version). An owner that is leaving (shutting down) yields to any taker, whatever the
// policy, because refusing would leave the node without an owner.
type Policy interface {
	// Allow reports whether taker may take over from owner, and why not.
	//
	// The instances come from peers on the node: Allow must not panic on
	// any value (e.g. a version that does not parse), and for any two
	// instances a and b, Allow(a, b) and Allow(b, a) must not both be
	// true, or racing newcomers could take turns forever.
	Allow(owner, taker Instance) (ok bool, reason string)
	// Name is the policy's configuration name.
	Name() string
}

// Policy names accepted by ParsePolicy.
const (
	PolicyNewestInstance = "newest-instance"
	PolicyNewestVersion  = "newest-version"
)

// ParsePolicy returns the policy with the given name; "" is the default,
// newest-instance.
func ParsePolicy(name string) (Policy, error) {
	switch name {
	case "", PolicyNewestInstance:
		return NewestInstance{}, nil
	case PolicyNewestVersion:
		return NewestVersion{}, nil
	}
	return nil, fmt.Errorf("unknown handover policy %q (want %q or %q)",
		name, PolicyNewestInstance, PolicyNewestVersion)
}

// NewestInstance lets the most recently started instance own the plugin,
// whatever its version: a rollback is just another rollout. This is the
// default.
type NewestInstance struct{}

// Name implements Policy.
func (NewestInstance) Name() string { return PolicyNewestInstance }

// Allow implements Policy.
func (NewestInstance) Allow(owner, taker Instance) (bool, string) {
	if newer(taker, owner) {
		return true, ""
	}
	return false, fmt.Sprintf("instance %s started before the owner %s (policy %s)",
		taker.ID, owner.ID, PolicyNewestInstance)
}

// NewestVersion lets an instance take over only if its version is not older
// than the owner's; among equal versions the newest instance wins. An older
// newcomer stays standby and reports why.
type NewestVersion struct{}

// Name implements Policy.
func (NewestVersion) Name() string { return PolicyNewestVersion }

// Allow implements Policy.
func (NewestVersion) Allow(owner, taker Instance) (bool, string) {
	ov, err := version.NewVersion(owner.Version)
	if err != nil {
		return false, fmt.Sprintf("owner version %q: %v", owner.Version, err)
	}
	tv, err := version.NewVersion(taker.Version)
	if err != nil {
		return false, fmt.Sprintf("taker version %q: %v", taker.Version, err)
	}
	switch {
	case tv.LessThan(ov):
		return false, fmt.Sprintf("version %s is older than the owner's %s (policy %s)",
			tv.Original(), ov.Original(), PolicyNewestVersion)
	case tv.GreaterThan(ov):
		return true, ""
	}
	return NewestInstance{}.Allow(owner, taker)
}

// newer reports whether a started after b; the instance id breaks ties so
// that two instances never both count as newer.
func newer(a, b Instance) bool {
	if !a.Started.Equal(b.Started) {
		return a.Started.After(b.Started)
	}
	return a.ID > b.ID
}
