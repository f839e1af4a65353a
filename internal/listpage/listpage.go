// Package listpage is the one way the operator tools (the CLI's inspect
// lists, the web console) fetch a page of a Store's list: they ask for
// one record more than the page to learn whether another page follows,
// and hand out the last id of the page as the cursor of the next.
package listpage

// Fetch fetches one page of limit records (1 to max, the largest limit
// the list takes: durable.MaxListLimit) through fetch, which is asked for
// up to limit+1; next is the cursor of the next page ("" on the last), the
// id of the page's last record. It imports nothing, as shared internals
// must not import the root (ARCHITECTURE.md).
func Fetch[T any](limit, max int, fetch func(limit int) ([]T, error), id func(T) string) (list []T, next string, err error) {
	list, err = fetch(min(limit+1, max))
	if err != nil {
		return nil, "", err
	}
	// At the largest limit no extra record can be asked for: a full page
	// may have a next one.
	more := len(list) > limit || (limit == max && len(list) == limit)
	list = list[:min(len(list), limit)]
	if more && len(list) > 0 {
		next = id(list[len(list)-1])
	}
	return list, next, nil
}
