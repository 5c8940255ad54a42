package deploy_test

import (
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestChartLint runs `helm lint --strict` on the chart with its defaults
// and each value set of chartCases: no warning, no error. (helm lint only
// logs a template's `fail`; TestChartRejectsInvalidValues covers those.)
func TestChartLint(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			res := lint.All(chartDir, c.values(t), c.namespace, true)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}
