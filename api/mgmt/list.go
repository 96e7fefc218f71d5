package mgmt

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Listing parameters of RabbitMQ's management API, applied to every list
// route: name (with use_regex) filters by name, sort and sort_reverse
// order by any field (dotted for nested ones), page and page_size turn
// the answer into a page object, and columns keeps only the fields named.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// row is one item of a listing whose JSON object is built only when the
// answer needs it: a page of 10,000 queues builds the objects of its page
// (and those its sort key needs when the row cannot give that key itself),
// not 10,000 maps of which 9,900 are thrown away.
type row struct {
	name string
	// key returns the value of a sort key without building the object;
	// false sends the sort to the object. nil knows no key but the name.
	key   func(k string) (any, bool)
	build func() map[string]any
	obj   map[string]any
}

func (r *row) json() map[string]any {
	if r.obj == nil {
		r.obj = r.build()
	}
	return r.obj
}

func (r *row) sortKey(k string) any {
	if k == "name" {
		return r.name
	}
	if r.key != nil {
		if v, ok := r.key(k); ok {
			return v
		}
	}
	return field(r.json(), k)
}

// list answers a list route with the request's listing parameters.
func (q *req) list(items []map[string]any) {
	rows := make([]*row, len(items))
	for i, m := range items {
		name, _ := m["name"].(string)
		rows[i] = &row{name: name, obj: m}
	}
	q.listRows(rows)
}

// listRows answers a list route of lazily built rows with the request's
// listing parameters.
func (q *req) listRows(rows []*row) {
	qs := q.r.URL.Query()
	total := len(rows)
	if name := qs.Get("name"); name != "" {
		match := func(s string) bool { return strings.Contains(s, name) }
		if qs.Get("use_regex") == "true" {
			re, err := regexp.Compile(name)
			if err != nil {
				writeError(q.w, badRequest("name is not a regular expression: %v", err))
				return
			}
			match = re.MatchString
		}
		rows = slices.DeleteFunc(rows, func(r *row) bool { return !match(r.name) })
	}
	if key := qs.Get("sort"); key != "" {
		slices.SortStableFunc(rows, func(a, b *row) int { return compareJSON(a.sortKey(key), b.sortKey(key)) })
	}
	if qs.Get("sort_reverse") == "true" {
		slices.Reverse(rows)
	}
	if qs.Get("page") != "" {
		page, err := strconv.Atoi(qs.Get("page"))
		size := defaultPageSize
		if s := qs.Get("page_size"); s != "" && err == nil {
			size, err = strconv.Atoi(s)
		}
		if err != nil || page < 1 || size < 1 || size > maxPageSize {
			writeError(q.w, badRequest("page must be at least 1 and page_size between 1 and %d", maxPageSize))
			return
		}
		filtered := len(rows)
		pages := (filtered + size - 1) / size
		if page > max(pages, 1) {
			writeError(q.w, badRequest("page %d is beyond the last page, %d", page, pages))
			return
		}
		from := min((page-1)*size, filtered)
		to := min(from+size, filtered)
		q.ok(map[string]any{
			"items": q.objects(rows[from:to]), "item_count": to - from, "page": page, "page_size": size,
			"page_count": pages, "filtered_count": filtered, "total_count": total,
		})
		return
	}
	q.ok(q.objects(rows))
}

// objects builds the rows' JSON objects, keeping only the requested
// columns.
func (q *req) objects(rows []*row) []map[string]any {
	var names []string
	if cols := q.r.URL.Query().Get("columns"); cols != "" {
		names = strings.Split(cols, ",")
	}
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		out[i] = r.json()
		if names != nil {
			out[i] = onlyColumns(out[i], names)
		}
	}
	return out
}

// field reads a dotted path in a JSON object.
func field(m map[string]any, path string) any {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = obj[k]
	}
	return cur
}

// onlyColumns keeps the dotted paths names of m.
func onlyColumns(m map[string]any, names []string) map[string]any {
	out := map[string]any{}
	for _, n := range names {
		v := field(m, n)
		if v == nil {
			continue
		}
		parts := strings.Split(n, ".")
		dst := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := dst[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				dst[p] = next
			}
			dst = next
		}
		dst[parts[len(parts)-1]] = v
	}
	return out
}

// compareJSON orders numbers by value and everything else by its text;
// missing values come first.
func compareJSON(a, b any) int {
	if a == nil || b == nil {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return -1
		}
		return 1
	}
	fa, aNum := number(a)
	fb, bNum := number(b)
	if aNum && bNum {
		return cmp.Compare(fa, fb)
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
