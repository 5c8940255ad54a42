// Package validator is a sample NRI validator plugin: it refuses container
// adjustments, made by any plugin, that mount a host path outside the
// allowed prefixes. Its commands are built twice from the same source:
// cmd/nri-validator on the nri-handover harness, cmd/nri-validator-bare on
// the bare NRI stub.
package validator

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
)

// MountPolicy validates the mounts plugins add to containers.
type MountPolicy struct {
	// Allowed are the host path prefixes a plugin may mount from.
	Allowed []string
	// Log receives one entry per refused adjustment.
	Log *logrus.Entry
}

// ValidateContainerAdjustment refuses an adjustment that adds a mount from
// a host path outside Allowed.
func (v *MountPolicy) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	for _, m := range req.GetAdjust().GetMounts() {
		if !v.allowed(m.GetSource()) {
			v.Log.WithFields(logrus.Fields{"container": req.GetContainer().GetName(), "source": m.GetSource()}).
				Warn("refused: mount source not allowed")
			return fmt.Errorf("mount of %s into %s: source not under %s", m.GetSource(), m.GetDestination(),
				strings.Join(v.Allowed, ", "))
		}
	}
	return nil
}

func (v *MountPolicy) allowed(source string) bool {
	source = filepath.Clean(source)
	for _, a := range v.Allowed {
		a = filepath.Clean(a)
		if source == a || strings.HasPrefix(source, a+"/") {
			return true
		}
	}
	return false
}
