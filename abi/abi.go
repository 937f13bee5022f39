// Package abi reads C function declarations and definitions with
// modernc.org/cc/v4 (a C preprocessor, parser and type checker in Go) and
// reduces their types to what a binary interface depends on: integer width
// and signedness, pointer-ness, and the pointee; it also reads a header's
// integer constants (#define NAME 42 /* comment */). The ABI contract test
// (contract_test.go) and cmd/dacgen, the generator of everything derived
// from the header (ctypes prototypes, status codes in Go, C and Python), use
// it: it is the one reader of the header.
package abi

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"modernc.org/cc/v4"
)

// Class is what the calling convention sees of a type.
type Class int

// The classes of type a declaration of the C ABI may use.
const (
	Void        Class = iota // void (a result only)
	Integer                  // an integer type
	Pointer                  // a pointer to data
	FuncPointer              // a pointer to a function
	Opaque                   // an incomplete struct (only behind a pointer)
	Struct                   // a complete struct of integer fields (only behind a pointer)
	Other                    // anything else: floating point, a struct of other fields...
)

// Type is a C type reduced to its ABI-relevant facts.
type Type struct {
	Class  Class
	Size   int64  // in bytes
	Signed bool   // for Integer
	Name   string // the spelling: a typedef name if any ("int64_t", "dac_cleanup_sender"), else the C type ("int", "char", "void")
	Elem   *Type  // the pointee, for Pointer
	Fields []Field
}

// Field is one field of a Struct.
type Field struct {
	Name   string
	Offset int64
	Type   Type
}

// String returns the type in C syntax without qualifiers, e.g. "int64_t*".
func (t Type) String() string {
	if t.Class == Pointer && t.Elem != nil && t.Name == "" {
		return t.Elem.String() + "*"
	}
	return t.Name
}

// Same reports whether t and u are the same type for the ABI: same class,
// size and signedness, and the same pointee; spellings may differ
// ("int64_t" and "long" are the same on LP64).
func (t Type) Same(u Type) bool {
	if t.Class != u.Class || t.Size != u.Size || t.Signed != u.Signed {
		return false
	}
	if t.Class == Pointer {
		return t.Elem != nil && u.Elem != nil && t.Elem.Same(*u.Elem)
	}
	if t.Class == Struct {
		if len(t.Fields) != len(u.Fields) {
			return false
		}
		for i, f := range t.Fields {
			g := u.Fields[i]
			if f.Name != g.Name || f.Offset != g.Offset || !f.Type.Same(g.Type) {
				return false
			}
		}
		return true
	}
	if t.Class == Opaque || t.Class == Other {
		return t.Name == u.Name
	}
	return true
}

// Param is one parameter of a function.
type Param struct {
	Name string
	Type Type
}

// Func is a function declared or defined in a translation unit.
type Func struct {
	Name     string
	Result   Type
	Params   []Param
	Variadic bool
	Defined  bool     // a definition, not only a declaration
	Static   bool     // internal linkage
	Hidden   bool     // declared __attribute__((visibility("hidden"))): external linkage within the shared object only
	Pos      string   // file:line of the first declaration or the definition
	Files    []string // the base names of the files that declare or define it, in order
}

// Signature returns the function as a C prototype without parameter names,
// e.g. "int dac_init(int64_t)".
func (f Func) Signature() string {
	var b strings.Builder
	b.WriteString(f.Result.String() + " " + f.Name + "(")
	for i, p := range f.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Type.String())
	}
	if f.Variadic {
		b.WriteString(", ...")
	}
	if len(f.Params) == 0 && !f.Variadic {
		b.WriteString("void")
	}
	return b.String() + ")"
}

// SameABI reports whether f and g have the same result and parameter types
// for the ABI (see Type.Same); names of parameters do not matter.
func (f Func) SameABI(g Func) bool {
	if !f.Result.Same(g.Result) || len(f.Params) != len(g.Params) || f.Variadic != g.Variadic {
		return false
	}
	for i := range f.Params {
		if !f.Params[i].Type.Same(g.Params[i].Type) {
			return false
		}
	}
	return true
}

// Options says how to parse a translation unit.
type Options struct {
	// IncludePaths are searched for #include "..." after the directory of the
	// including file.
	IncludePaths []string
	// Prefix selects the functions to return by name, e.g. "dac_".
	Prefix string
	// Defines is C source put before the file, e.g. "#define X 1\n".
	Defines string
}

var (
	baseConfigOnce sync.Once
	baseConfig     *cc.Config
	baseConfigErr  error
)

// config returns a fresh copy of the host C compiler's configuration; asking
// the compiler is slow, so that happens once.
func config(opts Options) (*cc.Config, error) {
	baseConfigOnce.Do(func() { baseConfig, baseConfigErr = cc.NewConfig("", "") })
	if baseConfigErr != nil {
		return nil, fmt.Errorf("abi: configuring the C front end from the host compiler: %w", baseConfigErr)
	}
	cfg := *baseConfig
	// "" is the including file's own directory; then ours; then the
	// compiler's own (cc/v4 resolves #include <...> with SysIncludePaths).
	cfg.IncludePaths = append(append([]string{""}, opts.IncludePaths...), baseConfig.IncludePaths...)
	return &cfg, nil
}

// Const is an object-like macro of the parsed file itself whose value is
// one integer literal: #define DAC_ERR_NOT_FOUND 5 /* no context ... */.
type Const struct {
	Name    string
	Value   int64
	Comment string // the comment that ends its line, if any
	Line    int
}

// Unit is what Parse found in a file.
type Unit struct {
	Funcs  []Func  // the functions named with Options.Prefix, in order of first declaration
	Consts []Const // its integer constants named with Options.Prefix in upper case, in file order
}

// ParseFile preprocesses, parses and type-checks the C file at path and
// returns the functions whose names start with opts.Prefix, in the order of
// their first declaration (a later definition marks them Defined).
func ParseFile(path string, opts Options) ([]Func, error) {
	u, err := Parse(path, opts)
	if err != nil {
		return nil, err
	}
	return u.Funcs, nil
}

// Parse is ParseFile with the file's constants as well.
func Parse(path string, opts Options) (*Unit, error) {
	cfg, err := config(opts)
	if err != nil {
		return nil, err
	}
	sources := []cc.Source{
		{Name: "<predefined>", Value: cfg.Predefined},
		{Name: "<builtin>", Value: cc.Builtin},
	}
	if opts.Defines != "" {
		sources = append(sources, cc.Source{Name: "<defines>", Value: opts.Defines})
	}
	sources = append(sources, cc.Source{Name: path})
	ast, err := cc.Translate(cfg, sources)
	if err != nil {
		return nil, fmt.Errorf("abi: %s: %w", path, err)
	}
	var funcs []Func
	index := map[string]int{}
	add := func(d *cc.Declarator, defined bool) error {
		name := d.Name()
		if !strings.HasPrefix(name, opts.Prefix) || d.IsTypename() {
			return nil
		}
		ft, ok := d.Type().(*cc.FunctionType)
		if !ok {
			return nil // a variable
		}
		f, err := convertFunc(name, ft)
		if err != nil {
			return fmt.Errorf("abi: %s: %s: %w", d.Position(), name, err)
		}
		f.Defined, f.Static = defined, d.IsStatic()
		if a := d.Type().Attributes(); a != nil && a.Visibility() == "hidden" {
			f.Hidden = true
		}
		pos := d.Position()
		file := filepath.Base(pos.Filename)
		f.Pos = fmt.Sprintf("%s:%d", file, pos.Line)
		f.Files = []string{file}
		if i, seen := index[name]; seen {
			if !funcs[i].SameABI(f) {
				return fmt.Errorf("abi: %s: %s redeclared as %s, was %s at %s", f.Pos, name, f.Signature(), funcs[i].Signature(), funcs[i].Pos)
			}
			if !slices.Contains(funcs[i].Files, file) {
				funcs[i].Files = append(funcs[i].Files, file)
			}
			funcs[i].Hidden = funcs[i].Hidden || f.Hidden // a declaration's visibility holds for the definition
			if defined {
				funcs[i].Defined, funcs[i].Static, funcs[i].Pos = true, f.Static, f.Pos
			}
			return nil
		}
		index[name] = len(funcs)
		funcs = append(funcs, f)
		return nil
	}
	consts, err := fileConsts(path, ast.Macros, strings.ToUpper(opts.Prefix))
	if err != nil {
		return nil, err
	}
	for l := ast.TranslationUnit; l != nil; l = l.TranslationUnit {
		ed := l.ExternalDeclaration
		switch ed.Case {
		case cc.ExternalDeclarationDecl:
			for il := ed.Declaration.InitDeclaratorList; il != nil; il = il.InitDeclaratorList {
				if err := add(il.InitDeclarator.Declarator, false); err != nil {
					return nil, err
				}
			}
		case cc.ExternalDeclarationFuncDef:
			if err := add(ed.FunctionDefinition.Declarator, true); err != nil {
				return nil, err
			}
		}
	}
	return &Unit{Funcs: funcs, Consts: consts}, nil
}

var trailingComment = regexp.MustCompile(`/\*\s*(.*?)\s*\*/\s*$`)

// fileConsts returns the integer constants that path itself defines (not
// its includes) with the prefix, in line order, each with the comment that
// ends its line.
func fileConsts(path string, macros map[string]*cc.Macro, prefix string) ([]Const, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []Const
	for name, m := range macros {
		pos := m.Position()
		if m.IsFnLike || !strings.HasPrefix(name, prefix) || filepath.Clean(pos.Filename) != filepath.Clean(path) {
			continue
		}
		toks := m.ReplacementList()
		if len(toks) != 1 {
			continue
		}
		v, err := strconv.ParseInt(toks[0].SrcStr(), 0, 64)
		if err != nil {
			continue // not an integer literal
		}
		c := Const{Name: name, Value: v, Line: pos.Line}
		if pos.Line >= 1 && pos.Line <= len(lines) {
			if sm := trailingComment.FindStringSubmatch(lines[pos.Line-1]); sm != nil {
				c.Comment = sm[1]
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Const) int { return a.Line - b.Line })
	return out, nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("abi: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

func convertFunc(name string, ft *cc.FunctionType) (Func, error) {
	f := Func{Name: name, Variadic: ft.IsVariadic()}
	var err error
	if f.Result, err = convertType(ft.Result()); err != nil {
		return f, fmt.Errorf("result: %w", err)
	}
	params := ft.Parameters()
	// f(void) comes as one unnamed parameter of type void.
	if len(params) == 1 && params[0].Type().Kind() == cc.Void {
		params = nil
	}
	for i, p := range params {
		t, err := convertType(p.Type())
		if err != nil {
			return f, fmt.Errorf("parameter %d (%s): %w", i+1, p.Name(), err)
		}
		if t.Class == Void || t.Class == Opaque || t.Class == Struct {
			return f, fmt.Errorf("parameter %d (%s) has type %s", i+1, p.Name(), t)
		}
		f.Params = append(f.Params, Param{Name: p.Name(), Type: t})
	}
	return f, nil
}

// convertType reduces a cc type; it keeps typedef names as spellings.
func convertType(t cc.Type) (Type, error) {
	name := ""
	if td := t.Typedef(); td != nil {
		name = td.Name()
	}
	switch {
	case t.Kind() == cc.Void:
		return Type{Class: Void, Name: "void"}, nil
	case cc.IsIntegerType(t) && t.Kind() != cc.Enum:
		if name == "" {
			name = strings.TrimPrefix(t.String(), "const ")
		}
		return Type{Class: Integer, Size: t.Size(), Signed: cc.IsSignedInteger(t), Name: name}, nil
	case t.Kind() == cc.Ptr:
		pt, ok := t.(*cc.PointerType)
		if !ok {
			return Type{}, fmt.Errorf("pointer type %s of unexpected form", t)
		}
		elem := pt.Elem()
		if elem.Kind() == cc.Function {
			if name == "" {
				name = "void*" // a function pointer spelled without typedef
			}
			return Type{Class: FuncPointer, Size: t.Size(), Name: name}, nil
		}
		e, err := convertType(elem)
		if err != nil {
			return Type{}, err
		}
		return Type{Class: Pointer, Size: t.Size(), Name: name, Elem: &e}, nil
	case (t.Kind() == cc.Struct || t.Kind() == cc.Union) && t.IsIncomplete():
		if name == "" {
			name = t.String()
		}
		return Type{Class: Opaque, Size: -1, Name: name}, nil
	case t.Kind() == cc.Struct:
		if name == "" {
			name = t.String()
		}
		st, ok := t.(*cc.StructType)
		if !ok {
			return Type{Class: Other, Size: t.Size(), Name: name}, nil
		}
		out := Type{Class: Struct, Size: t.Size(), Name: name}
		for i := range st.NumFields() {
			f := st.FieldByIndex(i)
			ft, err := convertType(f.Type())
			if err != nil || ft.Class != Integer || f.IsBitfield() {
				return Type{Class: Other, Size: t.Size(), Name: name}, nil
			}
			out.Fields = append(out.Fields, Field{Name: f.Name(), Offset: f.Offset(), Type: ft})
		}
		return out, nil
	default:
		if name == "" {
			name = t.String()
		}
		return Type{Class: Other, Size: t.Size(), Name: name}, nil
	}
}
