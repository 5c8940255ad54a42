package lifecycle

import (
	"hash/fnv"
	"testing"
)

// TestChecksumIsFNV1a: the record lives in memory that every version of a
// plugin maps, so the slot checksum must stay what older versions wrote:
// FNV-1a of the kind, id, a zero byte and pod, folded to 16 bits (never 0).
func TestChecksumIsFNV1a(t *testing.T) {
	long := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ id, pod string }{{"", ""}, {"ctr-1", "pod-1"}, {long, "p"}, {"x", long}} {
		for _, k := range []Kind{Container, Pod} {
			h := fnv.New32a()
			for _, b := range [][]byte{{byte(k)}, []byte(c.id), {0}, []byte(c.pod)} {
				_, _ = h.Write(b)
			}
			want := h.Sum32()
			want = (want ^ want>>16) & 0xffff
			if want == 0 {
				want = 1
			}
			if got := checksum(k, []byte(c.id), []byte(c.pod)); got != want {
				t.Fatalf("kind %v, id %q, pod %q: checksum %d, want %d", k, c.id, c.pod, got, want)
			}
		}
	}
}

// TestHashKeyIsHomeAndChecksum: find's one pass over an id gives the home
// slot and the checksum's start that home and checksum compute apart.
func TestHashKeyIsHomeAndChecksum(t *testing.T) {
	long := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, id := range []string{"", "ctr-1", long} {
		for _, k := range []Kind{Container, Pod} {
			at, sum := hashKey(k, id, DefaultSlots)
			if want := home(k, id, DefaultSlots); at != want {
				t.Fatalf("kind %v, id %q: home %d, want %d", k, id, at, want)
			}
			if got, want := sumPod(sum, []byte("pod-1")), checksum(k, []byte(id), []byte("pod-1")); got != want {
				t.Fatalf("kind %v, id %q: checksum %d, want %d", k, id, got, want)
			}
		}
	}
}
