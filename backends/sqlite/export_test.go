package sqlite

import "context"

// ExecOnWriterForTest runs a statement on b's write connection.
func ExecOnWriterForTest(b *Backend, stmt string) {
	if err := b.lockWriter(context.Background()); err != nil {
		panic(err)
	}
	defer b.unlockWriter()
	if _, err := b.wc.ExecContext(context.Background(), stmt); err != nil {
		panic(err)
	}
}
