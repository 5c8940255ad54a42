// Package deploy_test checks the Kubernetes manifests and the Helm chart in
// this directory: every document decodes strictly into the k8s.io/api types
// (unknown or duplicate fields fail), and every DaemonSet has what a
// zero-downtime nri-handover rollout needs. It lives in its own module so
// that helm's dependency tree stays out of the main module.
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

const (
	chartDir     = "charts/nri-handover-plugin"
	manifestsDir = "manifests"
)

// objects is what one manifest file or one chart rendering holds, decoded.
type objects struct {
	source          string
	namespaces      []corev1.Namespace
	serviceAccounts []corev1.ServiceAccount
	daemonSets      []appsv1.DaemonSet
}

// splitDocuments splits a multi-document YAML stream, dropping documents
// that hold only comments or whitespace.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
			continue
		}
		docs = append(docs, doc)
	}
}

// decodeStrict decodes every document of data into its k8s.io/api type,
// rejecting unknown fields, duplicate keys and kinds this directory does not
// ship.
func decodeStrict(source string, data []byte) (*objects, error) {
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	objs := &objects{source: source}
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		var derr error
		switch gvk := tm.APIVersion + "/" + tm.Kind; gvk {
		case "v1/Namespace":
			var o corev1.Namespace
			derr = yaml.UnmarshalStrict(doc, &o)
			objs.namespaces = append(objs.namespaces, o)
		case "v1/ServiceAccount":
			var o corev1.ServiceAccount
			derr = yaml.UnmarshalStrict(doc, &o)
			objs.serviceAccounts = append(objs.serviceAccounts, o)
		case "apps/v1/DaemonSet":
			var o appsv1.DaemonSet
			derr = yaml.UnmarshalStrict(doc, &o)
			objs.daemonSets = append(objs.daemonSets, o)
		default:
			return nil, &docError{source, i, errors.New("unexpected kind " + gvk)}
		}
		if derr != nil {
			return nil, &docError{source, i, derr}
		}
	}
	return objs, nil
}

type docError struct {
	source string
	doc    int
	err    error
}

func (e *docError) Error() string {
	return e.source + ": document " + strconv.Itoa(e.doc+1) + ": " + e.err.Error()
}

func (e *docError) Unwrap() error { return e.err }

// manifestFiles lists deploy/manifests/*.yaml.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests in " + manifestsDir)
	}
	return files
}

func loadManifest(t *testing.T, path string) *objects {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// chartValues reads one of the chart's ci/*-values.yaml files ("" for none).
func chartValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// render renders the chart as `helm template` would for a first install,
// with Strict on so that a template naming a value that does not exist
// fails. It returns the rendered files by name.
func render(ch *chart.Chart, release, namespace string, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities.Copy())
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, rv)
}

// renderObjects renders the chart and decodes its manifests strictly.
func renderObjects(ch *chart.Chart, release, namespace string, vals map[string]any) (*objects, map[string]string, error) {
	out, err := render(ch, release, namespace, vals)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var stream bytes.Buffer
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		stream.WriteString("---\n# Source: " + name + "\n")
		stream.WriteString(out[name])
		stream.WriteString("\n")
	}
	objs, err := decodeStrict("chart "+release, stream.Bytes())
	return objs, out, err
}
