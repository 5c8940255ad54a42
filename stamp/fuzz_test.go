package stamp

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Fixed inputs shared by the fuzz tests and their seed corpora in
// testdata/fuzz: the valid seeds were signed with exactly these.
const (
	fuzzPlugin    = "fuzz-plugin"
	fuzzContainer = "fuzz-container-0123456789abcdef"
)

func fuzzSigner(t testing.TB) *Signer {
	t.Helper()
	var key Key
	for i := range key {
		key[i] = byte(i)
	}
	s, err := NewSigner(fuzzPlugin, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkVerify verifies value and checks the invariants every outcome must
// satisfy. It reports whether the value was accepted.
func checkVerify(t *testing.T, s *Signer, value string) bool {
	t.Helper()
	ann := map[string]string{s.Key(): value}
	st, err := s.Verify(fuzzContainer, ann)
	// Check says what Verify says, without the stamp.
	if cerr := s.Check(fuzzContainer, ann); (cerr == nil) != (err == nil) || cerr != nil && cerr.Error() != err.Error() {
		t.Fatalf("Check(%q) = %v, Verify = %v", value, cerr, err)
	}
	if err != nil {
		malformed, forged := errors.Is(err, ErrMalformed), errors.Is(err, ErrForged)
		if malformed == forged { // exactly one of them, never ErrNoStamp
			t.Fatalf("Verify(%q) = %v: want exactly one of ErrMalformed, ErrForged", value, err)
		}
		if len(value) > maxValueLen && !malformed {
			t.Fatalf("Verify(%d-byte value) = %v, want ErrMalformed", len(value), err)
		}
		return false
	}
	if len(value) > maxValueLen {
		t.Fatalf("Verify accepted a %d-byte value", len(value))
	}
	if st.Plugin != fuzzPlugin || st.ContainerID != fuzzContainer || st.Version == nil {
		t.Fatalf("Verify(%q) = %+v", value, st)
	}
	// An accepted value is canonical: re-signing reproduces it exactly.
	again, err := s.Sign(fuzzContainer, st.Version, st.Instance)
	if err != nil {
		t.Fatalf("re-Sign of accepted %q: %v", value, err)
	}
	if again != value {
		t.Fatalf("accepted %q but re-signs to %q", value, again)
	}
	return true
}

// FuzzVerify checks that Verify never panics, classifies every rejection,
// and accepts only canonical values. Besides the raw input, which almost
// never carries a valid MAC, it verifies the input with its last field
// replaced by the correct MAC, so the parser behind the MAC check is fuzzed
// too; such a value must never be reported as forged.
func FuzzVerify(f *testing.F) {
	s := fuzzSigner(f)
	for _, seed := range []struct{ ver, instance string }{{"1.0.0", "a"}, {"2.1.0-rc.1+build.5", "pod-x"}} {
		v, err := ParseVersion(seed.ver)
		if err != nil {
			f.Fatal(err)
		}
		val, err := s.Sign(fuzzContainer, v, seed.instance)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(val)
	}
	f.Add("v1;1.0.0;a;AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, value string) {
		checkVerify(t, s, value)

		i := strings.LastIndexByte(value, ';')
		if i < 0 {
			return
		}
		fields := strings.Split(value[:i], fieldSep)
		if len(fields) != numFields-1 {
			return
		}
		var mac [macSize]byte
		s.mac(&mac, fuzzContainer, fields[1], fields[2])
		remac := value[:i+1] + macEncoding.EncodeToString(mac[:])
		if _, err := s.Verify(fuzzContainer, map[string]string{s.Key(): remac}); errors.Is(err, ErrForged) {
			t.Fatalf("Verify(%q) with correct MAC = %v", remac, err)
		}
		checkVerify(t, s, remac)
	})
}

// FuzzParseVersion checks that ParseVersion never panics, keeps the original
// string, names the input on error, and that every version it accepts can be
// stamped and read back.
func FuzzParseVersion(f *testing.F) {
	s := fuzzSigner(f)
	for _, seed := range []string{"1.0.0", "v2.1.0-rc.1+build.5", "", "v1..2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		v, err := ParseVersion(in)
		if err != nil {
			if v != nil {
				t.Fatalf("ParseVersion(%q) returned a version with error %v", in, err)
			}
			if want := "invalid plugin version " + strconv.Quote(in); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("ParseVersion(%q) error %q does not start with %q", in, err, want)
			}
			return
		}
		if v.Original() != in || strings.Contains(in, fieldSep) {
			t.Fatalf("ParseVersion(%q).Original() = %q", in, v.Original())
		}
		val, err := s.Sign(fuzzContainer, v, "fuzz")
		if len(in) > maxValueLen-len(FormatVersion)-len("fuzz")-macEncodedSize-(numFields-1) {
			if err == nil {
				t.Fatalf("Sign accepted a %d-byte value", len(val))
			}
			return
		}
		if err != nil {
			t.Fatalf("Sign with version %q: %v", in, err)
		}
		st, err := s.Verify(fuzzContainer, map[string]string{s.Key(): val})
		if err != nil {
			t.Fatalf("Verify(%q): %v", val, err)
		}
		if st.Version.Original() != in || st.Version.Compare(v) != 0 || st.Older(v) || v.LessThan(st.Version) {
			t.Fatalf("round trip of %q gave %q", in, st.Version.Original())
		}
	})
}

// TestFuzzVerifyCorpus keeps the committed FuzzVerify seeds meaningful: files
// named valid-*, forged-* and malformed-* must verify, fail the MAC check and
// fail parsing respectively under the fixed fuzz key and container.
func TestFuzzVerifyCorpus(t *testing.T) {
	s := fuzzSigner(t)
	paths, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzVerify", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 5 {
		t.Fatalf("only %d FuzzVerify seeds", len(paths))
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			header, body, ok := strings.Cut(strings.TrimSpace(string(data)), "\n")
			lit, ok2 := strings.CutPrefix(body, "string(")
			lit, ok3 := strings.CutSuffix(lit, ")")
			if !ok || !ok2 || !ok3 || header != "go test fuzz v1" {
				t.Fatalf("not a one-string corpus file: %q", data)
			}
			value, err := strconv.Unquote(lit)
			if err != nil {
				t.Fatalf("unquote %s: %v", lit, err)
			}
			_, err = s.Verify(fuzzContainer, map[string]string{s.Key(): value})
			switch {
			case strings.HasPrefix(name, "valid-"):
				if err != nil {
					t.Fatalf("Verify(%q): %v", value, err)
				}
				checkVerify(t, s, value)
			case strings.HasPrefix(name, "forged-"):
				if !errors.Is(err, ErrForged) {
					t.Fatalf("Verify(%q) = %v, want ErrForged", value, err)
				}
			case strings.HasPrefix(name, "malformed-"):
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Verify(%q) = %v, want ErrMalformed", value, err)
				}
			default:
				t.Fatalf("seed %s lacks a valid-/forged-/malformed- prefix", name)
			}
		})
	}
}

// TestVerifyLengthBound checks that the 512-byte limit is enforced before
// parsing, even for a value whose fields and MAC are otherwise correct.
func TestVerifyLengthBound(t *testing.T) {
	s := fuzzSigner(t)
	for _, n := range []int{maxValueLen, maxValueLen + 1} {
		instance := strings.Repeat("i", maxInstanceLen)
		ver := "1.0.0-" + strings.Repeat("a", n-len("v1;1.0.0-;;")-len(instance)-macEncodedSize)
		var mac [macSize]byte
		s.mac(&mac, fuzzContainer, ver, instance)
		value := "v1;" + ver + ";" + instance + ";" + macEncoding.EncodeToString(mac[:])
		if len(value) != n {
			t.Fatalf("built %d-byte value, want %d", len(value), n)
		}
		_, err := s.Verify(fuzzContainer, map[string]string{s.Key(): value})
		if n <= maxValueLen && err != nil {
			t.Fatalf("%d-byte value: %v", n, err)
		}
		if n > maxValueLen && !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d-byte value: err = %v, want ErrMalformed", n, err)
		}
	}
}
