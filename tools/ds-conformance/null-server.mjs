// A server that stores nothing: every PUT answers 201 and every POST 204 once its body is read,
// in a process of its own. bench.mjs runs its appends workload against it to measure the
// client's own ceiling (what this one Node process can send and read back on this machine), so
// a ratio to the reference is read beside what no server could beat. Prints its URL on the
// first line of stdout and runs until killed.
//
//   node null-server.mjs
import http from "node:http";

const server = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.statusCode = req.method === "PUT" ? 201 : 204;
    res.end();
  });
});
server.listen(0, "127.0.0.1", () => console.log(`http://127.0.0.1:${server.address().port}`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
