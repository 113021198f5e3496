package checkpoint_test

import (
	"fmt"

	"github.com/rindle-sh/rindle-go/checkpoint"
)

// An app that keeps its own message table gives the plane its names, and creates the chunk
// table with the DDL the plane expects, in its own migration.
func ExampleChunkTableDDL() {
	t := checkpoint.Tables{Message: "answers", Chunks: "answer_chunks", Columns: checkpoint.Columns{Key: "answer_id", Body: "content"}}
	stmts, err := checkpoint.ChunkTableDDL(t)
	if err != nil {
		panic(err)
	}
	fmt.Println(stmts[0])
	// Output:
	// CREATE TABLE IF NOT EXISTS "answer_chunks" ("stream_id" text NOT NULL, "seq" bigint NOT NULL, "text" text NOT NULL, PRIMARY KEY ("stream_id", "seq"))
}
