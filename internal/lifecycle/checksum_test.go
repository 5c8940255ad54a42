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
