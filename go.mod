module github.com/cairnstore/cairn

go 1.26.8
