module example.com/wordfreq

go 1.26
