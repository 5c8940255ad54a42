package protocol

import "github.com/nri-handover/nri-handover/handover"

// The public package's names the protocol uses, under their names there.
type (
	Policy         = handover.Policy
	NewestInstance = handover.NewestInstance
	NewestVersion  = handover.NewestVersion
	Instance       = handover.Instance
	Role           = handover.Role
	Status         = handover.Status
	Handover       = handover.Handover
)

// The public package's constants the protocol uses.
const (
	DefaultClaimTimeout = handover.DefaultClaimTimeout

	RoleUnknown = handover.RoleUnknown
	RoleJoining = handover.RoleJoining
	RoleOwner   = handover.RoleOwner
	RoleStandby = handover.RoleStandby
	RoleRetired = handover.RoleRetired
)

// ParsePolicy is handover.ParsePolicy.
func ParsePolicy(name string) (Policy, error) { return handover.ParsePolicy(name) }
