package producer

// SetDirectSink makes d's fast writes go to sink instead of the sockets (BenchmarkFanoutDirect).
// writer is the index of the writer goroutine writing (0 to Writers-1): each calls sink from
// its own goroutine only.
func SetDirectSink(d *DirectWriter, sink func(writer int, p []byte) (int, error)) { d.sink = sink }

// DirectWriterOf is the writer (as SetDirectSink numbers them) that the n-th reader started on
// d (counting from 1) goes to.
func DirectWriterOf(d *DirectWriter, n int) int { return d.shardOf(n) }
