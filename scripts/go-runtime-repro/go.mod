module repro

go 1.26
