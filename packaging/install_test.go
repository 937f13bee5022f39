// Package packaging tests `make install` as a C or C++ user meets it: the
// tree it writes into a staging DESTDIR, then a C program built with nothing
// but `pkg-config --cflags --libs distautograd` and a CMake project that
// calls find_package(distautograd), both built and run against that tree,
// then `make uninstall`. Like capi_test it never builds the library: make
// test does, and a stale build fails here.
package packaging

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"distautograd/abi"
)

// root is the repository root, from this package's directory.
const root = ".."

const prefix = "/usr/local"

// makeEnv is the environment of a make run from a test: the outer make's
// flags and variables (a `make test PREFIX=...` passes them down in
// MAKEFLAGS) must not reach it.
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "DESTDIR", "PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed by this test (apt-get install cmake pkg-config gcc g++; .ci/run installs them): %v", tool, err)
		}
	}
}

// headerVersion returns the header's version, "MAJOR.MINOR.PATCH", as
// package abi reads it.
func headerVersion(t *testing.T) string {
	t.Helper()
	v, err := abi.HeaderVersion(filepath.Join(root, "include", "distautograd.h"))
	if err != nil {
		t.Fatal(err)
	}
	return v.String()
}

// install runs make install into a fresh DESTDIR and returns it.
func install(t *testing.T) string {
	t.Helper()
	need(t, "make")
	cmd := exec.Command("make", "-q", "all")
	cmd.Dir = root
	cmd.Env = makeEnv()
	if err := cmd.Run(); err != nil {
		t.Fatalf("make -q all: %v: the library is not up to date: run make first", err)
	}
	destdir := t.TempDir()
	run(t, root, makeEnv(), "make", "--no-print-directory", "install", "DESTDIR="+destdir, "PREFIX="+prefix)
	return destdir
}

// files lists what is under dir (relative paths; links as "path -> target").
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			rel += " -> " + target
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// checkRun runs a consumer program and checks it used the installed library
// and header, of the header's version, and that a context round trip behaved.
func checkRun(t *testing.T, prog string, env []string, libdir string) {
	t.Helper()
	out := run(t, filepath.Dir(prog), env, prog)
	if !strings.Contains(out, "library "+filepath.Join(libdir, "libdistautograd.so.")) {
		t.Errorf("%s did not load the installed library from %s:\n%s", filepath.Base(prog), libdir, out)
	}
	version := headerVersion(t)
	for _, want := range []string{
		"header " + version + "\n",
		"version " + version + "\n",
		"context 844424930131968\n",
		"after release: Could not find autograd context with id: 844424930131968\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: no %q in its output:\n%s", filepath.Base(prog), want, out)
		}
	}
}

func TestInstallTree(t *testing.T) {
	version := headerVersion(t)
	major := strings.SplitN(version, ".", 2)[0]
	destdir := install(t)
	got := strings.Join(files(t, destdir), "\n")
	want := strings.Join([]string{
		"usr/local/include/distautograd.h",
		"usr/local/include/distautograd.hpp",
		"usr/local/lib/cmake/distautograd/distautograd-config-version.cmake",
		"usr/local/lib/cmake/distautograd/distautograd-config.cmake",
		"usr/local/lib/libdistautograd.so -> libdistautograd.so." + major,
		"usr/local/lib/libdistautograd.so." + major + " -> libdistautograd.so." + version,
		"usr/local/lib/libdistautograd.so." + version,
		"usr/local/lib/pkgconfig/distautograd.pc",
		"usr/local/share/distautograd/installed-folders",
	}, "\n")
	// The torch backend joins the tree when it was built (the Python
	// tests of the backend check it, and that it serves torch).
	var extra []string
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, "distautograd_torch") || strings.Contains(line, "distautograd-torch") ||
			strings.HasPrefix(line, "usr/local/share/distautograd/_") {
			extra = append(extra, line)
		}
	}
	for _, line := range extra {
		got = strings.Replace(got, line+"\n", "", 1)
	}
	if got != want {
		t.Errorf("installed tree:\n%s\nwant:\n%s", got, want)
	}

	f, err := elf.Open(filepath.Join(destdir, "usr/local/lib/libdistautograd.so."+version))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if soname, err := f.DynString(elf.DT_SONAME); err != nil || len(soname) != 1 || soname[0] != "libdistautograd.so."+major {
		t.Errorf("DT_SONAME = %q, %v; want libdistautograd.so.%s", soname, err, major)
	}
	if st, err := os.Stat(filepath.Join(destdir, "usr/local/lib/libdistautograd.so."+version)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("the library's mode: %v, %v; want 0755", st.Mode(), err)
	}
	pc, err := os.ReadFile(filepath.Join(destdir, "usr/local/lib/pkgconfig/distautograd.pc"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(pc), "prefix="+prefix+"\n") || strings.Contains(string(pc), destdir) {
		t.Errorf("distautograd.pc must name PREFIX (%s), never the staging DESTDIR (%s):\n%s", prefix, destdir, pc)
	}

	run(t, root, makeEnv(), "make", "--no-print-directory", "uninstall", "DESTDIR="+destdir, "PREFIX="+prefix)
	// Every folder was made by the install: none is left.
	if left, err := os.ReadDir(destdir); err != nil || len(left) != 0 {
		t.Errorf("make uninstall left %v (%v)", left, err)
	}
}

// TestInstallLdconfig: make install runs ldconfig only for a LIBDIR that
// the loader's configuration covers (LD_SO_CONF, its include lines
// followed), never for a staged install; make uninstall removes the folders
// the install made and keeps those that were there.
func TestInstallLdconfig(t *testing.T) {
	need(t, "make")
	tmp := t.TempDir()
	record := filepath.Join(tmp, "ldconfig-ran")
	ldconfig := filepath.Join(tmp, "fake-ldconfig")
	if err := os.WriteFile(ldconfig, []byte("#!/bin/sh\necho ran >> "+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	covered := filepath.Join(tmp, "covered")
	conf := filepath.Join(tmp, "ld.so.conf")
	if err := os.MkdirAll(filepath.Join(tmp, "ld.so.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, text := range map[string]string{
		conf: "# the system's\ninclude ld.so.conf.d/*.conf\n",
		filepath.Join(tmp, "ld.so.conf.d", "other.conf"):  "/opt/elsewhere/lib\n",
		filepath.Join(tmp, "ld.so.conf.d", "dac.conf"):    covered + "/lib\n",
		filepath.Join(tmp, "ld.so.conf.d", "ignored.txt"): tmp + "/private/lib\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ran := func() int {
		b, err := os.ReadFile(record)
		if os.IsNotExist(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(record)
		return strings.Count(string(b), "ran\n")
	}
	install := func(args ...string) string {
		return run(t, root, makeEnv(), "make", append([]string{"--no-print-directory", "install",
			"LDCONFIG=" + ldconfig, "LD_SO_CONF=" + conf}, args...)...)
	}

	private := filepath.Join(tmp, "private")
	out := install("PREFIX=" + private)
	if n := ran(); n != 0 || !strings.Contains(out, private+"/lib is not in the loader's configuration") {
		t.Errorf("a private PREFIX ran ldconfig %d times; output:\n%s", n, out)
	}
	run(t, root, makeEnv(), "make", "--no-print-directory", "uninstall", "PREFIX="+private)
	if _, err := os.Stat(private); !os.IsNotExist(err) {
		t.Errorf("make uninstall left the PREFIX it made, %s (%v): %q", private, err, files(t, private))
	}

	// A folder that held something before keeps it, and stays.
	keep := filepath.Join(covered, "lib", "keep.txt")
	if err := os.MkdirAll(filepath.Dir(keep), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out = install("PREFIX=" + covered)
	if n := ran(); n != 1 {
		t.Errorf("a PREFIX whose lib the configuration lists ran ldconfig %d times, want 1; output:\n%s", n, out)
	}
	run(t, root, makeEnv(), "make", "--no-print-directory", "uninstall", "PREFIX="+covered)
	if got := strings.Join(files(t, covered), " "); got != "lib/keep.txt" {
		t.Errorf("after uninstall %s holds %q, want only lib/keep.txt", covered, got)
	}
	if _, err := os.Stat(filepath.Join(covered, "include")); !os.IsNotExist(err) {
		t.Errorf("uninstall left the include folder it made (%v)", err)
	}

	out = install("PREFIX="+covered, "DESTDIR="+filepath.Join(tmp, "stage"))
	if n := ran(); n != 0 || !strings.Contains(out, "no ldconfig") {
		t.Errorf("a staged install ran ldconfig %d times; output:\n%s", n, out)
	}
}

// TestPkgConfigConsumer builds a C program with nothing but what pkg-config
// says, against the staged tree (PKG_CONFIG_SYSROOT_DIR: how a staged
// install is used before it is copied into place), and runs it.
func TestPkgConfigConsumer(t *testing.T) {
	need(t, "pkg-config", "gcc")
	destdir := install(t)
	libdir := filepath.Join(destdir, "usr/local/lib")
	env := append(makeEnv(),
		"PKG_CONFIG_LIBDIR="+filepath.Join(libdir, "pkgconfig"), // this tree's .pc files only
		"PKG_CONFIG_PATH=",
		"PKG_CONFIG_SYSROOT_DIR="+destdir)
	if v := strings.TrimSpace(run(t, destdir, env, "pkg-config", "--modversion", "distautograd")); v != headerVersion(t) {
		t.Errorf("pkg-config --modversion distautograd = %q, want %q", v, headerVersion(t))
	}
	flags := strings.Fields(run(t, destdir, env, "pkg-config", "--cflags", "--libs", "distautograd"))
	src, err := filepath.Abs(filepath.Join("testdata", "consumer.c"))
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(t.TempDir(), "consumer")
	run(t, destdir, env, "gcc", append([]string{"-std=c99", "-Wall", "-Wextra", "-Werror", src, "-o", prog}, flags...)...)
	// The staged lib directory is not one the loader searches: say where it is,
	// as `make install` into /usr/local plus ldconfig would.
	checkRun(t, prog, append(env, "LD_LIBRARY_PATH="+libdir), libdir)
}

// TestCMakeConsumer builds a C++ project that calls find_package and links
// distautograd::distautograd, against the staged tree, and runs it: CMake
// puts the imported library's directory in the build tree's RUNPATH.
func TestCMakeConsumer(t *testing.T) {
	need(t, "cmake", "g++")
	destdir := install(t)
	libdir := filepath.Join(destdir, "usr/local/lib")
	src, err := filepath.Abs(filepath.Join("testdata", "cmake"))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	env := append(makeEnv(), "CMAKE_PREFIX_PATH=", "LD_LIBRARY_PATH=")
	run(t, bin, env, "cmake", "-S", src, "-B", bin,
		"-DCMAKE_PREFIX_PATH="+filepath.Join(destdir, "usr/local"),
		"-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
		"-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror")
	run(t, bin, env, "cmake", "--build", bin)
	checkRun(t, filepath.Join(bin, "consumer"), env, libdir)

	// A version the install cannot satisfy is refused, as the version file says.
	bad := t.TempDir()
	b, err := os.ReadFile(filepath.Join(src, "CMakeLists.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lists := strings.Replace(string(b), "find_package(distautograd 0.1 REQUIRED)", "find_package(distautograd 1.0 REQUIRED)", 1)
	if lists == string(b) {
		t.Fatal("testdata/cmake/CMakeLists.txt no longer asks for distautograd 0.1")
	}
	for _, name := range []string{"CMakeLists.txt", "consumer.cpp"} {
		data := []byte(lists)
		if name != "CMakeLists.txt" {
			if data, err = os.ReadFile(filepath.Join(src, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(bad, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("cmake", "-S", bad, "-B", filepath.Join(bad, "build"), "-DCMAKE_PREFIX_PATH="+filepath.Join(destdir, "usr/local"))
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `compatible with requested version "1.0"`) {
		t.Errorf("find_package(distautograd 1.0) with %s installed: err %v, want the version refused:\n%s", headerVersion(t), err, out)
	}
}

// TestReadmeCExample builds the README's C program exactly as the README
// says (cc app.c $(pkg-config ...)) against a staged install, runs it and
// compares its output with the one the README shows.
func TestReadmeCExample(t *testing.T) {
	need(t, "pkg-config", "cc")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```c\n(/\\* app\\.c \\*/\n.*?)```\n").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```c block starting /* app.c */")
	}
	shown := regexp.MustCompile("(?s)cc app\\.c \\$\\(pkg-config --cflags --libs distautograd\\) -o app && \\./app\n```\n\n```\n(.*?)```\n").FindSubmatch(readme)
	if shown == nil {
		t.Fatal("README.md shows no output after `cc app.c $(pkg-config --cflags --libs distautograd) -o app && ./app`")
	}
	destdir := install(t)
	libdir := filepath.Join(destdir, "usr/local/lib")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "app.c"), m[1], 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(makeEnv(), "PKG_CONFIG_LIBDIR="+filepath.Join(libdir, "pkgconfig"), "PKG_CONFIG_PATH=",
		"PKG_CONFIG_SYSROOT_DIR="+destdir)
	run(t, dir, env, "sh", "-c", "cc -Wall -Wextra -Werror app.c $(pkg-config --cflags --libs distautograd) -o app")
	if got := run(t, dir, append(env, "LD_LIBRARY_PATH="+libdir), "./app"); got != string(shown[1]) {
		t.Errorf("the README's app.c printed\n%s\nthe README shows\n%s", got, shown[1])
	}

	// Into a folder of one's own: the README's lines as they are, in a
	// shell whose HOME is a fresh folder, with no hint where the library is
	// but what those lines give (no LD_LIBRARY_PATH, no ldconfig).
	block := regexp.MustCompile("(?s)```sh\n(make install PREFIX=\\S+)\n(.*?)```\n").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no ```sh block starting make install PREFIX=...")
	}
	home := t.TempDir()
	var shell []string
	for _, kv := range makeEnv() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "HOME", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR", "LIBRARY_PATH", "CPATH":
			continue
		}
		shell = append(shell, kv)
	}
	shell = append(shell, "HOME="+home)
	run(t, root, shell, "sh", "-c", string(block[1])+" LDCONFIG=false")
	prefix := run(t, root, shell, "sh", "-c", "echo "+strings.TrimPrefix(string(block[1]), "make install PREFIX="))
	defer run(t, root, shell, "sh", "-c", string(block[1])[:len("make ")]+"uninstall PREFIX="+strings.TrimSpace(prefix))
	if got := run(t, dir, shell, "sh", "-ec", string(block[2])); got != string(shown[1]) {
		t.Errorf("the README's lines for a PREFIX of one's own:\n%s\nprinted\n%s\nthe README shows\n%s", block[2], got, shown[1])
	}
}
