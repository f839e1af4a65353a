module github.com/durable-go/durable

go 1.26
