package handover

// Bad input to a policy (issue 5, docs/reliability.md): the policy names a
// binary reads and the identities a policy compares, as peers may send them.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-version"
)

// FuzzParsePolicy: ParsePolicy never panics, accepts exactly the two names
// and "" (the default), and names the input in every refusal.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"", PolicyNewestInstance, PolicyNewestVersion, "Newest-Version", "newest-version ", "oldest"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := ParsePolicy(name)
		valid := name == "" || name == PolicyNewestInstance || name == PolicyNewestVersion
		if err != nil {
			if valid || p != nil {
				t.Fatalf("ParsePolicy(%q) = %v, %v", name, p, err)
			}
			if want := "unknown handover policy " + strconv.Quote(name); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("ParsePolicy(%q): error %q does not start with %q", name, err, want)
			}
			return
		}
		want := name
		if want == "" {
			want = PolicyNewestInstance
		}
		if !valid || p.Name() != want {
			t.Fatalf("ParsePolicy(%q) = %s", name, p.Name())
		}
	})
}

// FuzzPolicyAllow: for any two identities (any versions, start times and
// ids, as a peer may send them), neither policy panics, a refusal always
// says why, two instances never may both take over from each other (so
// racing newcomers cannot take turns forever), and newest-version orders
// valid versions and refuses, naming it, a version it cannot parse.
func FuzzPolicyAllow(f *testing.F) {
	f.Add("1.0.0", "2.0.0", int64(1), int64(2), "a", "b")
	f.Add("2.0.0", "1.0.0", int64(1), int64(2), "a", "b")
	f.Add("1.0.0", "1.0.0", int64(5), int64(5), "b", "a")
	f.Add("1.0.0", "v1..2", int64(1), int64(2), "a", "b")
	f.Add("", "1.0.0-rc.1+build", int64(-1), int64(0), "", "")
	f.Fuzz(func(t *testing.T, ov, tv string, ostart, tstart int64, oid, tid string) {
		o := Instance{Plugin: "demo", ID: oid, Version: ov, Started: time.Unix(0, ostart)}
		tk := Instance{Plugin: "demo", ID: tid, Version: tv, Started: time.Unix(0, tstart)}
		for _, p := range []Policy{NewestInstance{}, NewestVersion{}} {
			ab, why := p.Allow(o, tk)
			ba, _ := p.Allow(tk, o)
			if !ab && why == "" {
				t.Fatalf("%s refused without a reason", p.Name())
			}
			if ab && ba {
				t.Fatalf("%s lets %v and %v each take over from the other", p.Name(), o, tk)
			}
		}
		ovv, oerr := version.NewVersion(ov)
		tvv, terr := version.NewVersion(tv)
		ok, why := NewestVersion{}.Allow(o, tk)
		switch {
		case oerr != nil || terr != nil:
			bad := ov
			if oerr == nil {
				bad = tv
			}
			if ok || !strings.Contains(why, strconv.Quote(bad)) {
				t.Fatalf("newest-version with invalid version %q: allowed %v, reason %q", bad, ok, why)
			}
		case !ovv.Equal(tvv) && ok != tvv.GreaterThan(ovv):
			t.Fatalf("newest-version: taker %s over owner %s: allowed %v (%s)", tv, ov, ok, why)
		}
	})
}
