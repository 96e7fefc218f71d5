package ttl

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The pure packages: DESIGN: "fsm, queue and ttl are pure and deterministic.
// They never read a clock, never do I/O, never spawn goroutines".
var purePackages = []string{"ttl", "queue", "fsm"}

// replyPackage holds the AMQP reply codes every layer names; it imports
// nothing (TestReplyImportsNothing), so a pure package may use it.
const replyPackage = "github.com/raftmq/raftmq/internal/replycode"

// forbiddenImport reports whether a pure package may not import path
// directly. Only direct imports count: the protobuf runtime the state
// machine needs imports os itself, and internal/anonmem, the anonymous
// memory queue keeps its records in, maps it with syscall (memory the
// queue allocates and frees, as it would on the heap: no I/O).
func forbiddenImport(path string) bool {
	switch path {
	case "net", "os/exec", "math/rand", "math/rand/v2", "crypto/rand", "log", "syscall",
		"github.com/hashicorp/raft", "github.com/hashicorp/memberlist":
		return true
	}
	for _, prefix := range []string{"net/", "github.com/hashicorp/raft/", "github.com/hashicorp/raft-boltdb", "github.com/hashicorp/raft-wal", "github.com/hashicorp/memberlist/"} {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// forbiddenTime are the time functions that read the clock or start timers.
var forbiddenTime = []string{"Now", "Since", "Until", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker", "Sleep"}

// sourceFiles returns the non-test .go files of the package folder dir.
func sourceFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out
}

func TestPureImports(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not found")
	}
	for _, pkg := range purePackages {
		dir := filepath.Join("..", pkg)
		if len(sourceFiles(t, dir)) == 0 {
			t.Logf("%s: no non-test .go files yet, skipped", pkg)
			continue
		}
		cmd := exec.Command("go", "list", "-e", "-f", "{{range .Imports}}{{.}}\n{{end}}", "./"+pkg)
		cmd.Dir = ".."
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list ./%s: %v\n%s", pkg, err, stderr.String())
		}
		for _, imp := range strings.Fields(string(out)) {
			if forbiddenImport(imp) {
				t.Errorf("package %s imports %s", pkg, imp)
			}
			// ttl imports the standard library only, and no os; the reply
			// codes, which import nothing, are the one exception.
			if pkg == "ttl" && imp != replyPackage && (imp == "os" || strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")) {
				t.Errorf("package ttl imports %s: it may import the standard library only, without os", imp)
			}
		}
	}
}

func TestReplyImportsNothing(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not found")
	}
	cmd := exec.Command("go", "list", "-f", "{{range .Imports}}{{.}}\n{{end}}", replyPackage)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", replyPackage, err)
	}
	if imps := strings.Fields(string(out)); len(imps) > 0 {
		t.Errorf("%s imports %v: it must import nothing", replyPackage, imps)
	}
}

func TestPureSources(t *testing.T) {
	for _, pkg := range purePackages {
		files := sourceFiles(t, filepath.Join("..", pkg))
		if len(files) == 0 {
			t.Logf("%s: no non-test .go files yet, skipped", pkg)
			continue
		}
		fset := token.NewFileSet()
		for _, name := range files {
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for _, v := range impurities(fset, f) {
				t.Errorf("package %s: %s", pkg, v)
			}
		}
	}
}

// impurities lists, with positions, the clock reads, timers and go
// statements in f. A reference such as `now := time.Now` counts too, not
// only a call.
func impurities(fset *token.FileSet, f *ast.File) []string {
	timeName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	var out []string
	if timeName == "." {
		// time.Now would read as a bare Now: refuse the dot import itself.
		out = append(out, fset.Position(f.Package).String()+": dot import of time")
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, fset.Position(n.Pos()).String()+": go statement")
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeName != "" && timeName != "_" && id.Name == timeName &&
				slices.Contains(forbiddenTime, n.Sel.Name) {
				out = append(out, fset.Position(n.Pos()).String()+": time."+n.Sel.Name)
			}
		}
		return true
	})
	return out
}

// TestImpuritiesDetects proves the scanner can fail: it must flag each
// forbidden construct in a sample and nothing in a clean one.
func TestImpuritiesDetects(t *testing.T) {
	const bad = `package p
import clock "time"
func f() {
	_ = clock.Now()
	go f()
	t := clock.NewTimer
	_ = t
	_ = clock.Duration(5) // allowed
}`
	const clean = `package p
import "time"
type Now struct{}
func g(now int64) time.Duration { var x struct{ Now int }; _ = x.Now; return time.Duration(now) * time.Millisecond }`
	fset := token.NewFileSet()
	fb, err := parser.ParseFile(fset, "bad.go", bad, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := impurities(fset, fb)
	if len(got) != 3 {
		t.Fatalf("flagged %d impurities in the bad sample, want 3: %v", len(got), got)
	}
	fc, err := parser.ParseFile(fset, "clean.go", clean, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := impurities(fset, fc); len(got) != 0 {
		t.Fatalf("flagged a clean sample: %v", got)
	}
	fd, err := parser.ParseFile(fset, "dot.go", "package p\nimport . \"time\"\nvar _ = Now", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := impurities(fset, fd); len(got) != 1 {
		t.Fatalf("dot import of time: flagged %v", got)
	}
	for _, p := range []string{"net", "net/http", "os/exec", "math/rand", "math/rand/v2", "crypto/rand", "log", "syscall",
		"github.com/hashicorp/raft", "github.com/hashicorp/raft-boltdb/v2", "github.com/hashicorp/raft-wal", "github.com/hashicorp/memberlist"} {
		if !forbiddenImport(p) {
			t.Errorf("%s not forbidden", p)
		}
	}
	for _, p := range []string{"crypto/sha256", "crypto/subtle", "log/slog", "math", "github.com/raftmq/raftmq/proto", "google.golang.org/protobuf/proto"} {
		if forbiddenImport(p) {
			t.Errorf("%s forbidden", p)
		}
	}
}
