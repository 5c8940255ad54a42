package plugin

import (
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestFlagsCoexistWithTheAuthors: a plugin that defines -name, -idx and
// -socket-path itself, as every upstream sample does, can register the
// harness's flags too (no "flag redefined" panic); its own flags are
// adopted, the harness's prefixed ones and the old aliases parse, and
// registering twice on one set (the drop-in package and the author) works.
func TestFlagsCoexistWithTheAuthors(t *testing.T) {
	fs := flag.NewFlagSet("upstream-sample", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "logger", "plugin name to register to NRI")
	idx := fs.String("idx", "", "plugin index to register to NRI")
	fs.String("socket-path", "", "NRI socket")
	RegisterFlags(fs)
	f := RegisterFlags(fs) // again: adopts its own
	err := fs.Parse([]string{"-idx", "42", "-socket-path", "/run/nri.sock", "-handover-dir", "/run/ho",
		"-handover-instance", "pod-a", "-policy", "newest-version", "-handover-version", "2.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if *name != "logger" || *idx != "42" {
		t.Fatalf("the author's flags: name %q idx %q", *name, *idx)
	}
	opts, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	var c config
	for _, o := range opts {
		if err := o(&c); err != nil {
			t.Fatal(err)
		}
	}
	if c.name != "logger" || c.idx != "42" || c.socketPath != "/run/nri.sock" || c.root != "/run/ho" ||
		c.instance != "pod-a" || c.version != "2.1.0" || c.policy == nil || c.policy.Name() != "newest-version" {
		t.Fatalf("options from the flags: %+v", c)
	}
}

// TestFlagsOfAPluginWithoutItsOwn: a plugin with no flags of its own gets
// NRI's -name, -idx and -socket-path, and the old -nri-socket alias.
func TestFlagsOfAPluginWithoutItsOwn(t *testing.T) {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"-name", "x", "-idx", "10", "-nri-socket", "/s", "-instance", "i"}); err != nil {
		t.Fatal(err)
	}
	if f.name != "x" || f.idx != "10" || f.socket != "/s" || f.instance != "i" {
		t.Fatalf("flags: %+v", f)
	}
}

// TestVersionFromEnvironment: $NRI_HANDOVER_VERSION gives the version
// when no option or flag does; an option wins over it.
func TestVersionFromEnvironment(t *testing.T) {
	t.Setenv(EnvVersion, "3.0.0")
	root := fzRoot(t)
	p, err := New(fzAuthor{}, WithPluginName("v"), WithPluginIdx("10"), WithHandoverDir(root), WithLogger(fzLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if p.Instance().Version != "3.0.0" {
		t.Fatalf("version %s, want 3.0.0 from $%s", p.Instance().Version, EnvVersion)
	}
	p.Close()
	p, err = New(fzAuthor{}, WithVersion("1.0.0"), WithPluginName("v"), WithPluginIdx("10"), WithHandoverDir(root),
		WithLogger(fzLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Instance().Version != "1.0.0" {
		t.Fatalf("version %s, want the option's 1.0.0", p.Instance().Version)
	}
}

// TestMetricsAddrNeedsTheMetricsPackage: this test binary does not link
// plugin/metrics, so a metrics address is refused at New with the fix.
func TestMetricsAddrNeedsTheMetricsPackage(t *testing.T) {
	_, err := New(fzAuthor{}, WithVersion("1.0.0"), WithPluginName("m"), WithPluginIdx("10"),
		WithHandoverDir(fzRoot(t)), WithLogger(fzLogger()), WithMetricsAddr(":0"))
	if err == nil || !strings.Contains(err.Error(), `import _ "github.com/nri-handover/nri-handover/plugin/metrics"`) {
		t.Fatalf("New with a metrics address and no metrics: %v", err)
	}
}

// TestDefaultLogHasMilliseconds: the harness's default logger stamps
// milliseconds, to tell the steps of a handover apart.
func TestDefaultLogHasMilliseconds(t *testing.T) {
	var buf strings.Builder
	std := logrus.StandardLogger()
	out, formatter := std.Out, std.Formatter
	defer func() { std.SetOutput(out); std.SetFormatter(formatter) }()
	std.SetOutput(&buf)
	std.SetFormatter(&logrus.TextFormatter{DisableColors: true})
	defaultLogger().Info("x")
	if !regexp.MustCompile(`time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}`).MatchString(buf.String()) {
		t.Fatalf("default log line %q has no millisecond timestamp", buf.String())
	}
}
