//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"
)

// writeOCIImage writes an OCI image layout tarball holding one image whose
// only file is the program at binPath, installed as /sleep and used as the
// entrypoint. The index carries io.containerd.image.name, so that
// `ctr images import` names the image without any registry.
func writeOCIImage(tarPath, binPath, name string) error {
	prog, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	mtime := time.Unix(0, 0)
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "sleep", Mode: 0o755, Size: int64(len(prog)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(prog); err != nil {
		return err
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
		"config":       map[string]any{"Entrypoint": []string{"/sleep"}},
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
	tw := tar.NewWriter(f)
	files := []struct {
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
			f.Close()
			return err
		}
	}
	for _, fl := range files {
		if err := tw.WriteHeader(&tar.Header{Name: fl.name, Mode: 0o644, Size: int64(len(fl.data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(fl.data); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// digestOf returns "sha256:<hex>" and the blob's path in the layout.
func digestOf(b []byte) (string, string) {
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	return "sha256:" + h, fmt.Sprintf("blobs/sha256/%s", h)
}
