package stamp_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-version"

	"github.com/nri-handover/nri-handover/stamp"
)

const (
	testPlugin    = "cpu-pinner"
	testContainer = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

func testKey(seed byte) stamp.Key {
	var k stamp.Key
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k
}

func newSigner(t testing.TB, plugin string, key stamp.Key) *stamp.Signer {
	t.Helper()
	s, err := stamp.NewSigner(plugin, key)
	if err != nil {
		t.Fatalf("NewSigner(%q): %v", plugin, err)
	}
	return s
}

func mustVersion(t testing.TB, s string) *version.Version {
	t.Helper()
	v, err := stamp.ParseVersion(s)
	if err != nil {
		t.Fatalf("ParseVersion(%q): %v", s, err)
	}
	return v
}

// signed returns an annotation map holding one stamp written by s.
func signed(t testing.TB, s *stamp.Signer, containerID, ver, instance string) map[string]string {
	t.Helper()
	val, err := s.Sign(containerID, mustVersion(t, ver), instance)
	if err != nil {
		t.Fatalf("Sign(%q, %q, %q): %v", containerID, ver, instance, err)
	}
	return map[string]string{s.Key(): val}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t, testPlugin, testKey(1))
	if got, want := s.Key(), "stamp.nri-handover.io/"+testPlugin; got != want {
		t.Fatalf("Key() = %q, want %q", got, want)
	}
	cases := []struct{ ver, instance string }{
		{"1.0.0", "a"},
		{"2.1.0-rc.1+build.5", "pod-7c9d8f-xk2lp"},
		{"0.0.1", "node1_instance.B-2"},
		{"v3.2", strings.Repeat("i", 128)},
	}
	for _, tc := range cases {
		t.Run(tc.ver, func(t *testing.T) {
			v := mustVersion(t, tc.ver)
			val, err := s.Sign(testContainer, v, tc.instance)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if !strings.HasPrefix(val, stamp.FormatVersion+";"+tc.ver+";"+tc.instance+";") {
				t.Fatalf("value %q does not start with format, version and instance", val)
			}
			if mac := val[strings.LastIndexByte(val, ';')+1:]; len(mac) != 22 {
				t.Fatalf("MAC %q has %d characters, want 22", mac, len(mac))
			}
			// Signing is deterministic.
			if again, _ := s.Sign(testContainer, v, tc.instance); again != val {
				t.Fatalf("Sign not deterministic: %q vs %q", val, again)
			}
			annotations := map[string]string{s.Key(): val, "other": "x"}
			st, err := s.Verify(testContainer, annotations)
			if err != nil {
				t.Fatalf("Verify(%q): %v", val, err)
			}
			if st.Plugin != testPlugin || st.ContainerID != testContainer || st.Instance != tc.instance {
				t.Fatalf("Verify = %+v", st)
			}
			if st.Version == nil || st.Version.Original() != tc.ver || !st.Version.Equal(v) {
				t.Fatalf("Verify version = %v, want %v", st.Version, tc.ver)
			}
		})
	}
}

func TestVerifyRejects(t *testing.T) {
	key := testKey(1)
	s := newSigner(t, testPlugin, key)
	good := signed(t, s, testContainer, "1.2.3", "inst-1")

	t.Run("missing annotation", func(t *testing.T) {
		for _, ann := range []map[string]string{nil, {}, {"unrelated": "v1;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA"}} {
			if _, err := s.Verify(testContainer, ann); !errors.Is(err, stamp.ErrNoStamp) {
				t.Fatalf("Verify(%v) = %v, want ErrNoStamp", ann, err)
			}
		}
	})
	t.Run("other container", func(t *testing.T) {
		if _, err := s.Verify("another-container", good); !errors.Is(err, stamp.ErrForged) {
			t.Fatalf("err = %v, want ErrForged", err)
		}
		if _, err := s.Verify("", good); !errors.Is(err, stamp.ErrForged) {
			t.Fatalf("empty container: err = %v, want ErrForged", err)
		}
	})
	t.Run("other key", func(t *testing.T) {
		other := newSigner(t, testPlugin, testKey(2))
		if _, err := other.Verify(testContainer, good); !errors.Is(err, stamp.ErrForged) {
			t.Fatalf("err = %v, want ErrForged", err)
		}
	})
	t.Run("other plugin", func(t *testing.T) {
		other := newSigner(t, "mem-balancer", key)
		if _, err := other.Verify(testContainer, good); !errors.Is(err, stamp.ErrNoStamp) {
			t.Fatalf("err = %v, want ErrNoStamp", err)
		}
		// Even a value copied under the other plugin's key does not verify:
		// the plugin name is part of the MAC.
		moved := map[string]string{other.Key(): good[s.Key()]}
		if _, err := other.Verify(testContainer, moved); !errors.Is(err, stamp.ErrForged) {
			t.Fatalf("moved value: err = %v, want ErrForged", err)
		}
	})
	t.Run("tampered fields", func(t *testing.T) {
		val := good[s.Key()]
		for _, forged := range []string{
			strings.Replace(val, ";1.2.3;", ";9.2.3;", 1),
			strings.Replace(val, ";inst-1;", ";inst-2;", 1),
			"v1;1.0.0;user;AAAAAAAAAAAAAAAAAAAAAA", // well-formed, garbage MAC
			"v1;1.2.3;inst-1;" + strings.Repeat("_", 21) + "w",
		} {
			_, err := s.Verify(testContainer, map[string]string{s.Key(): forged})
			if !errors.Is(err, stamp.ErrForged) || errors.Is(err, stamp.ErrMalformed) {
				t.Errorf("Verify(%q) = %v, want ErrForged", forged, err)
			}
		}
	})
	t.Run("malformed", func(t *testing.T) {
		val := good[s.Key()]
		mac := val[strings.LastIndexByte(val, ';')+1:]
		cases := map[string]string{
			"empty":               "",
			"one field":           "v1",
			"too few fields":      "v1;1.2.3;" + mac,
			"too many fields":     "v1;1.2.3;inst-1;x;" + mac,
			"trailing separator":  val + ";",
			"unknown format":      "v2;1.2.3;inst-1;" + mac,
			"empty format":        ";1.2.3;inst-1;" + mac,
			"bad version":         "v1;1..2;inst-1;" + mac,
			"empty version":       "v1;;inst-1;" + mac,
			"empty instance":      "v1;1.2.3;;" + mac,
			"bad instance":        "v1;1.2.3;in st;" + mac,
			"long instance":       "v1;1.2.3;" + strings.Repeat("i", 129) + ";" + mac,
			"bad base64":          "v1;1.2.3;inst-1;" + mac[:21] + "!",
			"std base64 alphabet": "v1;1.2.3;inst-1;" + mac[:21] + "+",
			"padded base64":       "v1;1.2.3;inst-1;" + mac + "==",
			"non-canonical MAC":   "v1;1.2.3;inst-1;" + strings.Repeat("A", 21) + "B",
			"newline in MAC":      "v1;1.2.3;inst-1;" + mac[:21] + "\n",
			"truncated MAC":       val[:len(val)-1],
			"empty MAC":           "v1;1.2.3;inst-1;",
			"long MAC":            val + "AAAA",
			"10kB value":          "v1;1.2.3;" + strings.Repeat("x", 10<<10) + ";" + mac,
			"513 bytes":           "v1;1.2.3;inst-1;" + strings.Repeat("A", 513-len("v1;1.2.3;inst-1;")),
		}
		for name, bad := range cases {
			t.Run(name, func(t *testing.T) {
				_, err := s.Verify(testContainer, map[string]string{s.Key(): bad})
				if !errors.Is(err, stamp.ErrMalformed) || errors.Is(err, stamp.ErrForged) {
					t.Fatalf("Verify(%.60q) = %v, want ErrMalformed", bad, err)
				}
				if !strings.Contains(err.Error(), s.Key()) {
					t.Errorf("error %q does not name the annotation", err)
				}
			})
		}
	})
}

func TestSignRejects(t *testing.T) {
	s := newSigner(t, testPlugin, testKey(1))
	v := mustVersion(t, "1.0.0")
	prefixed, err := version.NewVersion("rel;1.0.0", version.WithPrefix("rel;"))
	if err != nil {
		t.Fatalf("NewVersion with prefix: %v", err)
	}
	otherPrefix, err := version.NewVersion("release-1.0.0", version.WithPrefix("release-"))
	if err != nil {
		t.Fatalf("NewVersion with prefix: %v", err)
	}
	long := mustVersion(t, "1.0.0-"+strings.Repeat("a", 400))
	cases := []struct {
		name, container string
		v               *version.Version
		instance        string
	}{
		{"empty container", "", v, "a"},
		{"nil version", testContainer, nil, "a"},
		{"zero version", testContainer, &version.Version{}, "a"},
		{"semicolon in version", testContainer, prefixed, "a"},
		{"unparsable original", testContainer, otherPrefix, "a"},
		{"empty instance", testContainer, v, ""},
		{"long instance", testContainer, v, strings.Repeat("a", 129)},
		{"instance with space", testContainer, v, "a b"},
		{"instance with semicolon", testContainer, v, "a;b"},
		{"instance with slash", testContainer, v, "a/b"},
		{"value over 512 bytes", testContainer, long, strings.Repeat("a", 128)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if val, err := s.Sign(tc.container, tc.v, tc.instance); err == nil {
				t.Fatalf("Sign succeeded with %q", val)
			}
		})
	}
	// The longest accepted value still verifies.
	longest := mustVersion(t, "1.0.0-"+strings.Repeat("a", 512-3-22-128-len("v1")-len("1.0.0-")))
	val, err := s.Sign(testContainer, longest, strings.Repeat("a", 128))
	if err != nil {
		t.Fatalf("Sign longest: %v", err)
	}
	if len(val) != 512 {
		t.Fatalf("longest value is %d bytes, want 512", len(val))
	}
	if _, err := s.Verify(testContainer, map[string]string{s.Key(): val}); err != nil {
		t.Fatalf("Verify longest: %v", err)
	}
}

func TestOlder(t *testing.T) {
	cases := []struct {
		stamp, running string
		older          bool
	}{
		{"1.0.0", "2.0.0", true},
		{"2.0.0", "1.0.0", false},
		{"1.0.0", "1.0.0", false},
		{"1.9.0", "1.10.0", true},
		{"1.10.0", "1.9.0", false},
		{"2.0.0-rc.1", "2.0.0", true},
		{"v1.0.0", "1.0.0", false},
	}
	for _, tc := range cases {
		st := stamp.Stamp{Version: mustVersion(t, tc.stamp)}
		if got := st.Older(mustVersion(t, tc.running)); got != tc.older {
			t.Errorf("Stamp{%s}.Older(%s) = %v, want %v", tc.stamp, tc.running, got, tc.older)
		}
	}
	if (stamp.Stamp{}).Older(mustVersion(t, "1.0.0")) {
		t.Error("zero Stamp reports older")
	}
	if (stamp.Stamp{Version: mustVersion(t, "1.0.0")}).Older(nil) {
		t.Error("Older(nil) = true")
	}
}

func TestPluginNames(t *testing.T) {
	good := []string{"a", "Z", "0", "cpu-pinner", "my_plugin.v2", "A-b_c.D", strings.Repeat("x", 63)}
	for _, name := range good {
		k, err := stamp.AnnotationKey(name)
		if err != nil {
			t.Errorf("AnnotationKey(%q): %v", name, err)
			continue
		}
		if k != stamp.AnnotationPrefix+name {
			t.Errorf("AnnotationKey(%q) = %q", name, k)
		}
		if _, err := stamp.NewSigner(name, stamp.Key{}); err != nil {
			t.Errorf("NewSigner(%q): %v", name, err)
		}
	}
	bad := []string{"", strings.Repeat("x", 64), "-plugin", "plugin-", ".plugin", "_plugin",
		"a/b", "stamp.nri-handover.io/x", "my plugin", " plugin", "plugin\x00", "plügin", "a;b"}
	for _, name := range bad {
		if k, err := stamp.AnnotationKey(name); err == nil {
			t.Errorf("AnnotationKey(%q) = %q, want error", name, k)
		}
		if _, err := stamp.NewSigner(name, stamp.Key{}); err == nil {
			t.Errorf("NewSigner(%q) succeeded, want error", name)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, s := range []string{"1.0.0", "v1.2", "2.1.0-rc.1+build.5", "0.0.1", "10"} {
		v, err := stamp.ParseVersion(s)
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", s, err)
			continue
		}
		if v.Original() != s {
			t.Errorf("ParseVersion(%q).Original() = %q", s, v.Original())
		}
	}
	for _, s := range []string{"", "v1..2", "1.0;0", "latest", " 1.0.0", "1.0.0 ", "1.0.0\n", "99999999999999999999.0"} {
		_, err := stamp.ParseVersion(s)
		if err == nil {
			t.Errorf("ParseVersion(%q) succeeded, want error", s)
			continue
		}
		if want := `invalid plugin version "` + strings.ReplaceAll(s, "\n", `\n`) + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("ParseVersion(%q) error %q does not contain %q", s, err, want)
		}
	}
}

func TestLoadOrCreateKeyCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stamp.key")
	key, err := stamp.LoadOrCreateKey(path)
	if err != nil {
		t.Fatalf("LoadOrCreateKey: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Fatalf("mode = %v, want -rw-------", fi.Mode())
	}
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != stamp.KeySize || !bytes.Equal(content, key[:]) {
		t.Fatalf("file holds %x, key is %x", content, key)
	}
	if key == (stamp.Key{}) {
		t.Fatal("key is all zero")
	}

	// A second load returns the same key and leaves the file untouched.
	again, err := stamp.LoadOrCreateKey(path)
	if err != nil {
		t.Fatalf("second LoadOrCreateKey: %v", err)
	}
	if again != key {
		t.Fatalf("second load returned %x, want %x", again, key)
	}
	fi2, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	content2, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fi, fi2) || !fi.ModTime().Equal(fi2.ModTime()) || fi2.Mode() != fi.Mode() || !bytes.Equal(content, content2) {
		t.Fatalf("file changed: %v %v -> %v %v", fi.ModTime(), fi.Mode(), fi2.ModTime(), fi2.Mode())
	}

	// A different path yields a different key.
	other, err := stamp.LoadOrCreateKey(filepath.Join(t.TempDir(), "stamp.key"))
	if err != nil {
		t.Fatal(err)
	}
	if other == key {
		t.Fatal("two fresh keys are equal")
	}
}

func TestLoadOrCreateKeyRejects(t *testing.T) {
	write := func(t *testing.T, size int, mode os.FileMode) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "stamp.key")
		if err := os.WriteFile(path, bytes.Repeat([]byte{7}, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := map[string]func(t *testing.T) string{
		"too short": func(t *testing.T) string { return write(t, stamp.KeySize-1, 0o600) },
		"empty":     func(t *testing.T) string { return write(t, 0, 0o600) },
		"too long":  func(t *testing.T) string { return write(t, stamp.KeySize+1, 0o600) },
		"mode 0644": func(t *testing.T) string { return write(t, stamp.KeySize, 0o644) },
		"mode 0640": func(t *testing.T) string { return write(t, stamp.KeySize, 0o640) },
		"mode 0601": func(t *testing.T) string { return write(t, stamp.KeySize, 0o601) },
		"directory": func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "stamp.key")
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return path
		},
		"missing parent": func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope", "stamp.key") },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			path := setup(t)
			before, _ := os.ReadFile(path)
			beforeInfo, statErr := os.Stat(path)
			key, err := stamp.LoadOrCreateKey(path)
			if err == nil {
				t.Fatalf("LoadOrCreateKey succeeded with %x", key)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			// Never silently fixed.
			after, _ := os.ReadFile(path)
			afterInfo, _ := os.Stat(path)
			if !bytes.Equal(before, after) || (statErr == nil && afterInfo.Mode() != beforeInfo.Mode()) {
				t.Errorf("file was modified")
			}
		})
	}
	if _, err := stamp.LoadOrCreateKey(""); err == nil {
		t.Error("empty path accepted")
	}
}

func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	const n = 8
	path := filepath.Join(t.TempDir(), "stamp.key")
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		keys  [n]stamp.Key
		errs  [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			keys[i], errs[i] = stamp.LoadOrCreateKey(path)
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if keys[i] != keys[0] {
			t.Fatalf("goroutine %d got %x, goroutine 0 got %x", i, keys[i], keys[0])
		}
	}
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(content, keys[0][:]) {
		t.Fatalf("file holds %x, goroutines got %x", content, keys[0])
	}
}

func BenchmarkSign(b *testing.B) {
	s := newSigner(b, testPlugin, testKey(1))
	v := mustVersion(b, "2.1.0-rc.1+build.5")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(testContainer, v, "pod-7c9d8f-xk2lp"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b, testPlugin, testKey(1))
	ann := signed(b, s, testContainer, "2.1.0-rc.1+build.5", "pod-7c9d8f-xk2lp")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(testContainer, ann); err != nil {
			b.Fatal(err)
		}
	}
}

// A Stamper signs exactly as Sign does, and fails where Sign fails for
// every container, with the same error.
func TestStamperMatchesSign(t *testing.T) {
	s := newSigner(t, testPlugin, testKey(1))
	prefixed, err := version.NewVersion("rel;1.0.0", version.WithPrefix("rel;"))
	if err != nil {
		t.Fatalf("NewVersion with prefix: %v", err)
	}
	cases := []struct {
		v        *version.Version
		instance string
	}{
		{mustVersion(t, "1.0.0"), "a"},
		{mustVersion(t, "2.1.0-rc.1+build.5"), "pod-7c9d8f-xk2lp"},
		{mustVersion(t, "v3.2"), strings.Repeat("i", 128)},
		{nil, "a"},
		{&version.Version{}, "a"},
		{prefixed, "a"},
		{mustVersion(t, "1.0.0"), ""},
		{mustVersion(t, "1.0.0"), "a;b"},
		{mustVersion(t, "1.0.0-"+strings.Repeat("a", 400)), strings.Repeat("a", 128)},
	}
	for i, tc := range cases {
		st, stErr := s.Stamper(tc.v, tc.instance)
		for _, id := range []string{testContainer, "c", ""} {
			if stErr != nil && id == "" {
				continue // Sign checks the container id first
			}
			want, wantErr := s.Sign(id, tc.v, tc.instance)
			got, gotErr := "", stErr
			if stErr == nil {
				got, gotErr = st.Sign(id)
			}
			if got != want || (gotErr == nil) != (wantErr == nil) ||
				(gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Errorf("case %d, container %q: Stamper gives %q, %v; Sign gives %q, %v", i, id, got, gotErr, want, wantErr)
			}
		}
	}
}

// Verify hands out a Version of its own each time, also when it parsed the
// version string before, and verifies stamps of any number of versions.
func TestVerifyVersionsAreCopies(t *testing.T) {
	s := newSigner(t, testPlugin, testKey(1))
	ann := signed(t, s, testContainer, "1.2.3", "a")
	first, err := s.Verify(testContainer, ann)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Version.UnmarshalText([]byte("9.9.9")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		again, err := s.Verify(testContainer, ann)
		if err != nil {
			t.Fatal(err)
		}
		if again.Version == first.Version || again.Version.Original() != "1.2.3" || again.Version.String() != "1.2.3" {
			t.Fatalf("Verify after the caller changed an earlier result: version %v (%p, earlier %p)",
				again.Version, again.Version, first.Version)
		}
	}
	for i := 0; i < 40; i++ { // more versions than the signer keeps parsed
		ver := "1." + strings.Repeat("0.", i%3) + string(rune('0'+i%10)) + "-r" + strings.Repeat("x", i)
		for j := 0; j < 2; j++ {
			st, err := s.Verify(testContainer, signed(t, s, testContainer, ver, "a"))
			if err != nil || st.Version.Original() != ver || !st.Version.Equal(mustVersion(t, ver)) {
				t.Fatalf("Verify of a stamp of version %q: %v, %v", ver, st.Version, err)
			}
		}
	}
	// A forged stamp of a new version fails however often it comes back.
	forged := signed(t, newSigner(t, testPlugin, testKey(2)), testContainer, "7.0.0", "a")
	for i := 0; i < 2; i++ {
		if _, err := s.Verify(testContainer, forged); !errors.Is(err, stamp.ErrForged) {
			t.Fatalf("Verify(forged) = %v, want ErrForged", err)
		}
	}
}

// BenchmarkStamperSign is the harness's CreateContainer path: the version
// and instance checked once, a MAC per container.
func BenchmarkStamperSign(b *testing.B) {
	s := newSigner(b, testPlugin, testKey(1))
	st, err := s.Stamper(mustVersion(b, "2.1.0-rc.1+build.5"), "pod-7c9d8f-xk2lp")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.Sign(testContainer); err != nil {
			b.Fatal(err)
		}
	}
}

// Check returns what Verify returns, without the stamp.
func TestCheckMatchesVerify(t *testing.T) {
	s := newSigner(t, testPlugin, testKey(1))
	good := signed(t, s, testContainer, "1.2.3", "inst-1")[s.Key()]
	other := signed(t, newSigner(t, testPlugin, testKey(2)), testContainer, "1.2.3", "inst-1")[s.Key()]
	values := []string{
		good, other, "", ";;;", "v1;1.2.3;inst-1", "v2" + good[2:], "v1;1.2.x;inst-1;" + good[len(good)-22:],
		"v1;1.2.3;inst 1;" + good[len(good)-22:], good[:len(good)-1], good[:len(good)-1] + "!",
		strings.Repeat("a", 600),
	}
	for _, ann := range []map[string]string{nil, {"other": good}} {
		if err := s.Check(testContainer, ann); !errors.Is(err, stamp.ErrNoStamp) {
			t.Errorf("Check(%v) = %v, want ErrNoStamp", ann, err)
		}
	}
	for _, id := range []string{testContainer, "another"} {
		for _, v := range values {
			for i := 0; i < 2; i++ { // the second time with the version parsed before
				ann := map[string]string{s.Key(): v}
				_, verr := s.Verify(id, ann)
				cerr := s.Check(id, ann)
				if (cerr == nil) != (verr == nil) || cerr != nil && cerr.Error() != verr.Error() {
					t.Errorf("container %q, value %q: Check = %v, Verify = %v", id, v, cerr, verr)
				}
			}
		}
	}
	if err := s.Check(testContainer, map[string]string{s.Key(): good}); err != nil {
		t.Errorf("Check(good) = %v", err)
	}
}
