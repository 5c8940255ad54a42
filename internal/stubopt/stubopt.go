// Package stubopt finds out what a containerd/nri stub.Option sets, so the
// harness can apply each option an author passes safely or refuse it by
// name. A stub.Option is an opaque function of the stub's unexported
// state: it is applied to a scratch copy of that state and the fields it
// changed are read back with reflection. The tests pin the field names to
// the NRI version in go.mod; a stub that renames them fails them.
package stubopt

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"unsafe"

	"github.com/containerd/nri/pkg/stub"
)

// Effect is what one stub.Option sets.
type Effect struct {
	// Name is the option's constructor, e.g. "stub.WithOnClose".
	Name string
	// Fields are the stub fields the option set, e.g. "onClose".
	Fields []string
	// OnClose is the callback a stub.WithOnClose option sets, if any.
	OnClose func()
	// PluginName, PluginIdx and SocketPath are what stub.WithPluginName,
	// stub.WithPluginIdx and stub.WithSocketPath set, if they did.
	PluginName, PluginIdx, SocketPath string
}

// Sets reports whether the option set field.
func (e Effect) Sets(field string) bool {
	for _, f := range e.Fields {
		if f == field {
			return true
		}
	}
	return false
}

// Inspect applies o to a zero stub and reports what it set. An option that
// fails on a zero stub is reported with its error.
func Inspect(o stub.Option) (Effect, error) {
	e := Effect{Name: optionName(o)}
	if o == nil {
		return e, fmt.Errorf("nil stub option")
	}
	fn := reflect.ValueOf(o)
	target := reflect.New(fn.Type().In(0).Elem()) // a *stub.stub, all zero
	if out := fn.Call([]reflect.Value{target})[0]; !out.IsNil() {
		return e, fmt.Errorf("%s: %v", e.Name, out.Interface())
	}
	s := target.Elem()
	for i := 0; i < s.NumField(); i++ {
		f := s.Field(i)
		if f.IsZero() {
			continue
		}
		name := s.Type().Field(i).Name
		e.Fields = append(e.Fields, name)
		switch name {
		case "onClose":
			// Unexported: read through its address (the scratch stub is ours).
			e.OnClose = *(*func())(unsafe.Pointer(f.UnsafeAddr()))
		case "name":
			e.PluginName = f.String()
		case "idx":
			e.PluginIdx = f.String()
		case "socketPath":
			e.SocketPath = f.String()
		}
	}
	return e, nil
}

// optionName names the constructor of o, e.g. "stub.WithOnClose", from the
// closure's function name ("github.com/containerd/nri/pkg/stub.WithOnClose.func1").
// Every stub.Option comes from one of package stub's constructors.
func optionName(o stub.Option) string {
	if o == nil {
		return "nil stub option"
	}
	f := runtime.FuncForPC(reflect.ValueOf(o).Pointer())
	if f == nil {
		return "stub option"
	}
	// The closure is "<constructor>.funcN", possibly after the name of the
	// function it was inlined into: the segment before funcN names it.
	parts := strings.Split(f.Name(), ".")
	for i := len(parts) - 1; i > 0; i-- {
		if strings.HasPrefix(parts[i], "func") {
			return "stub." + parts[i-1]
		}
	}
	return "stub option " + f.Name()
}
