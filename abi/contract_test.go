package abi

// The ABI contract: include/distautograd.h, parsed and type-checked with
// cc/v4, is the one list of functions and types; everything that implements
// or binds the C ABI must agree with it:
//   (a) the .so exports each of its functions, and nothing else;
//   (b) capi.c's unit defines each of them, and no other function with
//       external linkage but hidden dacc_* ones; the dacgo_* functions it
//       calls are declared alike in csrc/dacgo.h and in cgo's generated
//       header (the Go //export signatures), one list on both sides;
//   (c) the Python bindings' ctypes prototypes agree with it in argument
//       count, integer width and signedness, pointer-ness and result;
//   (d) its status codes are the ones Go (container.Code), the .so
//       (dac_status_string) and Python (Status) know, by value and name.
// cmd/dacgen generates the Go, C and Python copies from the header; its own
// test says when one is stale, this one when anything disagrees.

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"distautograd/container"
)

var (
	headerPath = filepath.Join(root, "include", "distautograd.h")
	libPath    = filepath.Join(root, "build", "libdistautograd.so")
	cgoHeader  = filepath.Join(root, "build", "cgo_generated.h")
	abiPyPath  = filepath.Join(root, "python_bindings", "distautograd", "_abi.py")
)

var (
	headerOnce  sync.Once
	headerFuncs []Func
	headerErr   error
)

// publicFuncs returns the functions of include/distautograd.h, in order.
func publicFuncs(t *testing.T) []Func {
	t.Helper()
	headerOnce.Do(func() { headerFuncs, headerErr = ParseFile(headerPath, Options{Prefix: "dac_"}) })
	if headerErr != nil {
		t.Fatal(headerErr)
	}
	return headerFuncs
}

func names(funcs []Func) []string {
	var out []string
	for _, f := range funcs {
		out = append(out, f.Name)
	}
	return out
}

func TestHeaderDeclaresOnlyPrototypes(t *testing.T) {
	funcs := publicFuncs(t)
	if len(funcs) < 40 {
		t.Fatalf("found %d functions in %s, expected the whole C ABI: %v", len(funcs), headerPath, names(funcs))
	}
	for _, f := range funcs {
		if f.Defined || f.Static || f.Variadic {
			t.Errorf("%s: %s: a header of the C ABI declares non-variadic external functions only", f.Pos, f.Signature())
		}
		if f.Files[0] != "distautograd.h" {
			t.Errorf("%s: %s declared outside the header", f.Pos, f.Name)
		}
		for _, p := range f.Params {
			if p.Name == "" {
				t.Errorf("%s: %s: every parameter is named (the names document it)", f.Pos, f.Signature())
			}
		}
	}
}

// (a) the dynamic symbol table of the built library.
func TestLibraryExportsExactlyTheHeader(t *testing.T) {
	built(t)
	funcs := publicFuncs(t)
	f, err := elf.Open(libPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			continue // imported, or not visible
		}
		exported[s.Name] = s
	}
	want := map[string]bool{}
	for _, fn := range funcs {
		want[fn.Name] = true
		s, ok := exported[fn.Name]
		switch {
		case !ok:
			t.Errorf("%s does not export %s (declared at %s)", libPath, fn.Name, fn.Pos)
		case elf.ST_TYPE(s.Info) != elf.STT_FUNC:
			t.Errorf("%s exports %s as %v, not a function", libPath, fn.Name, elf.ST_TYPE(s.Info))
		case elf.ST_BIND(s.Info) != elf.STB_GLOBAL:
			t.Errorf("%s exports %s with binding %v, want STB_GLOBAL", libPath, fn.Name, elf.ST_BIND(s.Info))
		}
	}
	// Nothing else: no dac_ function the header does not declare, no dacgo_
	// trampoline, no Go or cgo runtime symbol (libdistautograd.map).
	var extra []string
	for name := range exported {
		if !want[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	if len(extra) > 0 {
		t.Errorf("%s exports %d symbols include/distautograd.h does not declare: %v", libPath, len(extra), extra)
	}
	v, err := HeaderVersion(headerPath)
	if err != nil {
		t.Fatal(err)
	}
	if soname, err := f.DynString(elf.DT_SONAME); err != nil || len(soname) != 1 || soname[0] != v.Soname() {
		t.Errorf("DT_SONAME = %q, %v; want [%s]", soname, err, v.Soname())
	}
}

// (b) capi.c's unit, with cgo's header standing in for the _cgo_export.h it
// includes (go build writes that one in a temporary directory).
func TestCapiDefinesEveryHeaderFunction(t *testing.T) {
	built(t)
	funcs := publicFuncs(t)
	capi := parseCapi(t)
	defs := map[string]Func{}
	for _, f := range capi {
		if f.Defined {
			defs[f.Name] = f
		}
	}
	public := map[string]bool{}
	for _, h := range funcs {
		public[h.Name] = true
		d, ok := defs[h.Name]
		switch {
		case !ok:
			t.Errorf("capi.c does not define %s (declared at %s)", h.Signature(), h.Pos)
		case d.Static:
			t.Errorf("%s: %s is static", d.Pos, h.Name)
		case !d.SameABI(h):
			t.Errorf("%s: %s defined as %s, declared as %s", d.Pos, h.Name, d.Signature(), h.Signature())
		}
	}
	// Every other function of the unit is static, or a hidden dacc_*
	// function that one room of csrc/ gives the others, declared in the
	// room's header and defined in its .c (csrc/dacc.h). Why: a function
	// with external linkage and default visibility in a shared object may
	// be interposed by another object at load time, so the compiler neither
	// inlines it nor calls it directly (each call goes through the PLT, on
	// paths that take a few nanoseconds), and only the linker's version
	// script would keep it out of the library's ABI. A hidden one is called
	// and inlined as a static one is, and is never exported.
	for _, d := range capi {
		if !d.Defined || d.Static || public[d.Name] {
			continue
		}
		if !strings.HasPrefix(d.Name, "dacc_") || !d.Hidden {
			t.Errorf("%s: %s has external linkage but is neither in include/distautograd.h nor a hidden dacc_ function "+
				"(make it static, declare it in the header, or name it dacc_* and declare it DACC_HIDDEN in its room's header: csrc/dacc.h)", d.Pos, d.Name)
			continue
		}
		def, _, _ := strings.Cut(d.Pos, ":")
		if header := strings.TrimSuffix(def, ".c") + ".h"; d.Files[0] != header {
			t.Errorf("%s: %s is first declared in %s, not in its room's header %s", d.Pos, d.Name, d.Files[0], header)
		}
	}
}

func parseCapi(t *testing.T) []Func {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(cgoHeader)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_cgo_export.h"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	funcs, err := ParseFile(filepath.Join(root, "capi.c"), Options{IncludePaths: []string{dir, root}, Prefix: "dac"})
	if err != nil {
		t.Fatal(err)
	}
	return funcs
}

// (b) the C side's view of Go (csrc/dacgo.h) and Go's own (cgo's header
// of the //export functions). Both are in one translation unit, as in
// capi.c, so cc/v4 already rejects a conflicting pair; this also requires
// the two lists to be the same.
func TestInternalHeaderMatchesGoExports(t *testing.T) {
	built(t)
	funcs, err := ParseFile(cgoHeader, Options{IncludePaths: []string{root}, Prefix: "dacgo_"})
	if err != nil {
		t.Fatal(err)
	}
	var inCgo, inInternal int
	for _, f := range funcs {
		internal := slices.Contains(f.Files, "dacgo.h")
		cgo := slices.ContainsFunc(f.Files, func(s string) bool { return s != "dacgo.h" })
		switch {
		case internal && cgo:
			inCgo++
			inInternal++
		case internal:
			inInternal++
			t.Errorf("%s: %s is declared in csrc/dacgo.h but no Go function exports it", f.Pos, f.Signature())
		case cgo:
			inCgo++
			t.Errorf("Go exports %s (cgo header: %s) but csrc/dacgo.h does not declare it", f.Signature(), f.Pos)
		}
	}
	if inCgo == 0 {
		t.Fatalf("no dacgo_ function in %s", cgoHeader)
	}
}

// (c) The Python side: python3 loads _abi.py and describes each ctypes type
// by what ctypes itself reports (sizeof, signedness, pointer-ness), so a
// generator bug or a hand edit shows, not only a stale file (that is
// cmd/dacgen's test).
func TestPythonPrototypesAgreeWithHeader(t *testing.T) {
	python := need(t, "python3")
	funcs := publicFuncs(t)
	script := `
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_abi", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

def describe(t):
    if t is None:
        return "void"
    if t is ctypes.c_char_p:
        return "*c"
    if t is ctypes.c_void_p:
        return "*v"
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return "*" + describe(t._type_)
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        return "{%s}" % ",".join("%s@%d:%s" % (n, getattr(t, n).offset, describe(ft)) for n, ft in t._fields_)
    if t is ctypes.c_char:
        return "c"
    size = ctypes.sizeof(t)
    signed = t(-1).value < 0
    return ("i" if signed else "u") + str(8 * size)

out = []
for name, (res, args) in mod.PROTOTYPES.items():
    out.append([name, describe(res), [describe(a) for a in args]])
json.dump(out, sys.stdout)
`
	cmd := exec.Command(python, "-c", script, abiPyPath)
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 reading %s: %v", abiPyPath, err)
	}
	var got [][]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	py := map[string][]any{}
	var order []string
	for _, e := range got {
		py[e[0].(string)] = e
		order = append(order, e[0].(string))
	}
	if !slices.Equal(order, names(funcs)) {
		t.Errorf("_abi.py has the functions\n  %v\nthe header, in order\n  %v", order, names(funcs))
	}
	for _, f := range funcs {
		e, ok := py[f.Name]
		if !ok {
			continue
		}
		if want := describe(f.Result); e[1] != want {
			t.Errorf("%s: ctypes result is %v, the header's %s is %s", f.Name, e[1], f.Result, want)
		}
		args := e[2].([]any)
		if len(args) != len(f.Params) {
			t.Errorf("%s: ctypes has %d arguments, the header %d: %s", f.Name, len(args), len(f.Params), f.Signature())
			continue
		}
		for i, p := range f.Params {
			if want := describe(p.Type); args[i] != want {
				t.Errorf("%s: argument %d (%s): ctypes says %v, the header's %s is %s", f.Name, i+1, p.Name, args[i], p.Type, want)
			}
		}
	}
}

// describe gives the header's type in the terms of the Python script above.
func describe(t Type) string {
	switch t.Class {
	case Void:
		return "void"
	case Integer:
		if t.Name == "char" {
			return "c"
		}
		if t.Signed {
			return fmt.Sprintf("i%d", 8*t.Size)
		}
		return fmt.Sprintf("u%d", 8*t.Size)
	case FuncPointer:
		return "*v"
	case Struct:
		var fs []string
		for _, f := range t.Fields {
			fs = append(fs, fmt.Sprintf("%s@%d:%s", f.Name, f.Offset, describe(f.Type)))
		}
		return "{" + strings.Join(fs, ",") + "}"
	case Pointer:
		switch t.Elem.Class {
		case Void, Opaque, FuncPointer:
			return "*v"
		}
		return "*" + describe(*t.Elem)
	}
	return "?" + t.String()
}

// (d) The status codes: the header's DAC_OK and DAC_ERR_*, numbered 0, 1,
// 2... (dac_status_string indexes a table), against Go's container.Code,
// the built library's dac_status_string and Python's Status, which python3
// reads from _abi.py and asks the library about through ctypes.
func TestStatusCodesAgree(t *testing.T) {
	built(t)
	u, err := Parse(headerPath, Options{Prefix: "dac_"})
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	for _, c := range u.Consts {
		if c.Name != "DAC_OK" && !strings.HasPrefix(c.Name, "DAC_ERR_") {
			continue
		}
		if c.Value != int64(len(header)) {
			t.Errorf("distautograd.h:%d: %s = %d, want %d (codes are numbered 0, 1, 2... in header order)", c.Line, c.Name, c.Value, len(header))
		}
		header = append(header, c.Name)
	}
	if len(header) < 2 {
		t.Fatalf("found status codes %v in %s", header, headerPath)
	}
	var goNames []string
	for i := range len(header) + 1 {
		goNames = append(goNames, container.Code(i).String())
	}
	if want := append(slices.Clone(header), fmt.Sprintf("Code(%d)", len(header))); !slices.Equal(goNames, want) {
		t.Errorf("container.Code names by value:\n  %v\nthe header's:\n  %v", goNames, want)
	}

	python := need(t, "python3")
	script := `
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_abi", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
lib = ctypes.CDLL(sys.argv[2])
lib.dac_status_string.restype = ctypes.c_char_p
lib.dac_status_string.argtypes = (ctypes.c_int,)
n = int(sys.argv[3])
json.dump({
    "python": [[s.name, int(s)] for s in mod.Status],
    "library": [lib.dac_status_string(i).decode() for i in range(-1, n + 1)],
}, sys.stdout)
`
	cmd := exec.Command(python, "-c", script, abiPyPath, libPath, fmt.Sprint(len(header)))
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var got struct {
		Python  [][2]any
		Library []string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	var py []string
	for i, e := range got.Python {
		py = append(py, "DAC_"+e[0].(string))
		if int(e[1].(float64)) != i {
			t.Errorf("Python Status.%s = %v, want %d", e[0], e[1], i)
		}
	}
	if !slices.Equal(py, header) {
		t.Errorf("Python's Status (_abi.py):\n  %v\nthe header's codes:\n  %v", py, header)
	}
	want := append(append([]string{"DAC_UNKNOWN"}, header...), "DAC_UNKNOWN")
	if !slices.Equal(got.Library, want) {
		t.Errorf("dac_status_string(-1..%d) of %s:\n  %v\nwant:\n  %v", len(header), libPath, got.Library, want)
	}
}
