package api

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

// list answers a list route with the request's listing parameters.
func (q *req) list(items []map[string]any) {
	items = nonNil(items)
	qs := q.r.URL.Query()
	total := len(items)
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
		items = slices.DeleteFunc(items, func(m map[string]any) bool {
			s, _ := m["name"].(string)
			return !match(s)
		})
	}
	if key := qs.Get("sort"); key != "" {
		slices.SortStableFunc(items, func(a, b map[string]any) int { return compareJSON(field(a, key), field(b, key)) })
	}
	if qs.Get("sort_reverse") == "true" {
		slices.Reverse(items)
	}
	if cols := qs.Get("columns"); cols != "" {
		names := strings.Split(cols, ",")
		for i, m := range items {
			items[i] = onlyColumns(m, names)
		}
	}
	if qs.Get("page") == "" {
		q.ok(items)
		return
	}
	page, err := strconv.Atoi(qs.Get("page"))
	size := defaultPageSize
	if s := qs.Get("page_size"); s != "" && err == nil {
		size, err = strconv.Atoi(s)
	}
	if err != nil || page < 1 || size < 1 || size > maxPageSize {
		writeError(q.w, badRequest("page must be at least 1 and page_size between 1 and %d", maxPageSize))
		return
	}
	filtered := len(items)
	pages := (filtered + size - 1) / size
	if page > max(pages, 1) {
		writeError(q.w, badRequest("page %d is beyond the last page, %d", page, pages))
		return
	}
	from := min((page-1)*size, filtered)
	to := min(from+size, filtered)
	q.ok(map[string]any{
		"items": items[from:to], "item_count": to - from, "page": page, "page_size": size,
		"page_count": pages, "filtered_count": filtered, "total_count": total,
	})
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
