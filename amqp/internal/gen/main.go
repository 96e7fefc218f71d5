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
	out := flag.String("out", "", "output directory of the codec")
	replyOut := flag.String("reply", "", "output directory of the reply codes")
	flag.Parse()
	if *specPath == "" || *out == "" || *replyOut == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -spec FILE -out DIR -reply DIR")
		os.Exit(2)
	}
	if err := run(*specPath, *out, *replyOut); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(specPath, out, replyOut string) error {
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
		dir, name, tmpl string
		data            any
	}{
		{out, "zz_generated_constants.go", constantsTemplate, struct {
			*model
			Major, Minor, Revision int
		}{m, s.Major, s.Minor, s.Revision}},
		{out, "zz_generated_methods.go", methodsTemplate, m},
		{out, "zz_generated_properties.go", propertiesTemplate, m},
		{out, "zz_generated_samples_test.go", samplesTemplate, m},
		{replyOut, "zz_generated_codes.go", replyTemplate, m},
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
		if err := os.WriteFile(filepath.Join(f.dir, f.name), src, 0o644); err != nil {
			return err
		}
	}
	return nil
}
