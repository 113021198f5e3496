package migrations

// MigrateTo applies the migrations up to and including version upto, for tests that start
// from an older schema.
var MigrateTo = migrateTo //nolint:gochecknoglobals // test export
