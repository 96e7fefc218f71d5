// Command gen generates the AMQP 0-9-1 codec of package wire from the
// specification XML.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
)

func itoa(n int) string { return strconv.Itoa(n) }

func main() {
	specPath := flag.String("spec", "", "specification XML")
	out := flag.String("out", "", "output directory")
	flag.Parse()
	if *specPath == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -spec FILE -out DIR")
		os.Exit(2)
	}
	if err := run(*specPath, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(specPath, out string) error {
	s, err := load(specPath)
	if err != nil {
		return err
	}
	m, err := build(s, filepath.Base(specPath))
	if err != nil {
		return err
	}
	funcs["upper"] = func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
	files := []struct {
		name, tmpl string
		data       any
	}{
		{"zz_generated_constants.go", constantsTemplate, struct {
			*model
			Major, Minor, Revision int
		}{m, s.Major, s.Minor, s.Revision}},
		{"zz_generated_methods.go", methodsTemplate, m},
		{"zz_generated_properties.go", propertiesTemplate, m},
		{"zz_generated_samples_test.go", samplesTemplate, m},
	}
	for _, f := range files {
		t, err := template.New(f.name).Funcs(funcs).Parse(f.tmpl)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, f.data); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		src, err := format.Source(buf.Bytes())
		if err != nil {
			return fmt.Errorf("%s: format: %w\n%s", f.name, err, buf.Bytes())
		}
		if err := os.WriteFile(filepath.Join(out, f.name), src, 0o644); err != nil {
			return err
		}
	}
	return nil
}
