//go:build k8s

package deploy_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// pluginVersions are the plugin builds the rollouts switch between.
var pluginVersions = []string{"1.0.0", "2.0.0"}

// The images, named as the shipped manifests and the chart name them: the
// suite builds them from the repository and imports them, so that
// `imagePullPolicy: IfNotPresent` finds them and nothing is pulled.
func auditImage(v string) string     { return "ghcr.io/nri-handover/nri-audit:" + v }
func versionedImage(v string) string { return "ghcr.io/nri-handover/nri-versioned:" + v }

// imageFile is one file of an image's only layer.
type imageFile struct {
	name string // path in the image, without leading slash
	src  string // file on the host
}

// writeOCIImage writes an OCI image layout tarball of one single-layer
// image. The index carries io.containerd.image.name so that `ctr images
// import` names the image without a registry.
func writeOCIImage(tarPath, name string, files []imageFile, imgConfig map[string]any) error {
	mtime := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirList []string
	for d := range dirs {
		dirList = append(dirList, d)
	}
	// Parents before children.
	for i := range dirList {
		for j := i + 1; j < len(dirList); j++ {
			if strings.Count(dirList[j], "/") < strings.Count(dirList[i], "/") {
				dirList[i], dirList[j] = dirList[j], dirList[i]
			}
		}
	}
	for _, d := range dirList {
		if err := lw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: mtime, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if err := lw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := lw.Write(b); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerDigest, layerBlob := digestOf(layer.Bytes())

	type descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    map[string]string `json:"platform,omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       imgConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest, configBlob := digestOf(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: configDigest, Size: len(config)},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: layer.Len()}},
	})
	if err != nil {
		return err
	}
	manifestDigest, manifestBlob := digestOf(manifest)
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manifestDigest, Size: len(manifest),
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "1"},
			Platform:    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{layerBlob, layer.Bytes()},
		{configBlob, config},
		{manifestBlob, manifest},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func digestOf(b []byte) (string, string) {
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	return "sha256:" + h, "blobs/sha256/" + h
}

// importImages builds and imports the sleep image (pause and workload) and
// the plugin images of every version: the plugin and nri-handover in
// /usr/local/bin, which is on the image's PATH, as the Dockerfiles have it.
func (c *cluster) importImages() error {
	type img struct {
		name  string
		files []imageFile
		cfg   map[string]any
	}
	imgs := []img{{sleepImage, []imageFile{{"sleep", filepath.Join(c.bin, "e2e-sleep")}},
		map[string]any{"Entrypoint": []string{"/sleep"}}}}
	pathEnv := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, v := range pluginVersions {
		b := filepath.Join(c.bin, v)
		imgs = append(imgs,
			img{auditImage(v), []imageFile{{"usr/local/bin/nri-audit", filepath.Join(b, "nri-audit")},
				{"usr/local/bin/nri-handover", filepath.Join(b, "nri-handover")}},
				map[string]any{"Env": pathEnv, "Entrypoint": []string{"/usr/local/bin/nri-audit"}}},
			img{versionedImage(v), []imageFile{{"usr/local/bin/nri-versioned", filepath.Join(b, "nri-versioned")},
				{"usr/local/bin/nri-handover", filepath.Join(b, "nri-handover")}},
				map[string]any{"Env": pathEnv, "Entrypoint": []string{"/usr/local/bin/nri-versioned"}}})
	}
	start := time.Now()
	for i, im := range imgs {
		tarPath := filepath.Join(c.root, fmt.Sprintf("image-%d.tar", i))
		if err := writeOCIImage(tarPath, im.name, im.files, im.cfg); err != nil {
			return fmt.Errorf("image %s: %w", im.name, err)
		}
		if _, err := c.ctr("images", "import", tarPath); err != nil {
			return err
		}
		_ = os.Remove(tarPath)
	}
	c.progress("imported %d images in %v", len(imgs), time.Since(start).Round(time.Millisecond))
	return nil
}

func httpGet(url string) (string, error) {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func httpGetOK(url string) error {
	cl := &http.Client{Timeout: time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
