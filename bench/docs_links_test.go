package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the README and docs/*.md (which make bench
// rewrites in part) names a file or folder that exists, and every #anchor
// of a link within docs/go-runtime.md (the page other documents point into
// by section) is one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "python_bindings", "README.md")}, docs...)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: the link %s names no file (%v)", rel, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				if !hasAnchor(t, dest, anchor) {
					t.Errorf("%s: the link %s names no heading of %s", rel, target, filepath.Base(dest))
				}
			}
		}
	}
}

// hasAnchor says whether a Markdown file has a heading whose GitHub anchor
// is anchor (lower case, spaces to hyphens, punctuation but - and _ dropped).
func hasAnchor(t *testing.T, file, anchor string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var id strings.Builder
		for _, r := range heading {
			switch {
			case r == ' ':
				id.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				id.WriteRune(r)
			}
		}
		if id.String() == anchor {
			return true
		}
	}
	return false
}
