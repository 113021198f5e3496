package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func loadCompose(t *testing.T, env []string, profiles ...string) (*types.Project, error) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(env), cli.WithName("rindle"), cli.WithProfiles(profiles))
	require.NoError(t, err)
	return opts.LoadProject(t.Context())
}

// TestComposeFileMatchesTheBinary loads docker-compose.yml with the compose-spec loader (no
// Docker engine runs here) and checks every wire between the services against what rindled
// reads and serves.
func TestComposeFileMatchesTheBinary(t *testing.T) {
	// No set-up: the file loads with an empty environment (every compose command, down
	// included, used to fail without RINDLE_JWT_SECRET).
	p, err := loadCompose(t, nil)
	require.NoError(t, err)

	names := p.ServiceNames()
	slices.Sort(names)
	require.Equal(t, []string{"jaeger", "otel-collector", "postgres", "prometheus", "rindled", "secret"}, names)
	pg, rd, col, jg := p.Services["postgres"], p.Services["rindled"], p.Services["otel-collector"], p.Services["jaeger"]

	require.Contains(t, []string(pg.Command), "wal_level=logical", "the CDC reader needs logical replication")
	require.NotNil(t, pg.HealthCheck)

	// Every variable rindled is given is one it reads.
	known := map[string]bool{}
	_, err = parse("rindled", nil, func(k string) string { known[k] = true; return "" }, io.Discard, nil)
	require.NoError(t, err)
	for k := range rd.Environment {
		require.True(t, known[k], "rindled does not read %s", k)
	}
	env := func(k string) string {
		v := rd.Environment[k]
		require.NotNil(t, v, k)
		return *v
	}
	checkSecretWiring(t, p, "rindled")

	// DATABASE_URL reaches the postgres service with its credentials.
	db, err := pgx.ParseConfig(env("DATABASE_URL"))
	require.NoError(t, err)
	require.Equal(t, "postgres", db.Host)
	require.Equal(t, uint16(5432), db.Port)
	require.Equal(t, *pg.Environment["POSTGRES_USER"], db.User)
	require.Equal(t, *pg.Environment["POSTGRES_PASSWORD"], db.Password)
	require.Equal(t, *pg.Environment["POSTGRES_DB"], db.Database)
	require.Equal(t, types.ServiceConditionHealthy, rd.DependsOn["postgres"].Condition)

	// The listen address is the published port, on every interface inside the container.
	require.Equal(t, "0.0.0.0:8080", env("RINDLE_ADDR"))
	require.Len(t, rd.Ports, 1)
	require.Equal(t, uint32(8080), rd.Ports[0].Target)

	// The health check runs the binary's own health command against that address.
	require.NotNil(t, rd.HealthCheck)
	require.Equal(t, []string{"CMD", "/rindled", "health", "-addr", "0.0.0.0:8080"}, []string(rd.HealthCheck.Test))
	err = run(t.Context(), []string{"health", "-addr", "127.0.0.1:1"}, envOf(nil), io.Discard, io.Discard)
	require.ErrorContains(t, err, "health:", "the health command exists")
	dockerfile, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	require.Contains(t, string(dockerfile), "./cmd/rindled")
	require.Contains(t, string(dockerfile), `ENTRYPOINT ["/rindled"]`, "the health check's path is the image's binary")

	// Traces: rindled → collector (OTLP/HTTP) → Jaeger (OTLP/gRPC), and the collector's debug
	// exporter, so its log shows each span where Jaeger does not run.
	otlp, err := url.Parse(env("OTEL_EXPORTER_OTLP_ENDPOINT"))
	require.NoError(t, err)
	require.Equal(t, "otel-collector", otlp.Hostname())
	var colCfg struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct{ Endpoint string } `yaml:"http"`
				}
			} `yaml:"otlp"`
		}
		Exporters map[string]struct{ Endpoint string }
		Service   struct {
			Telemetry struct {
				Metrics struct {
					Readers []struct {
						Pull struct {
							Exporter struct {
								Prometheus struct {
									Host string
									Port int
								}
							}
						}
					}
				}
			}
			Pipelines map[string]struct{ Receivers, Processors, Exporters []string }
		}
	}
	raw, err := os.ReadFile("../../deploy/otel-collector.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &colCfg))
	require.True(t, strings.HasSuffix(colCfg.Receivers.OTLP.Protocols.HTTP.Endpoint, ":"+otlp.Port()), "the collector listens where rindled sends")
	require.Equal(t, []string{"otlp_grpc/jaeger", "debug"}, colCfg.Service.Pipelines["traces"].Exporters)
	require.Equal(t, "jaeger:4317", colCfg.Exporters["otlp_grpc/jaeger"].Endpoint)
	require.Empty(t, col.DependsOn, "nothing waits for Jaeger: the stack runs without it")
	require.Equal(t, types.ServiceConditionHealthy, rd.DependsOn["otel-collector"].Condition)
	require.Len(t, colCfg.Service.Pipelines, 1, "metrics are scraped, not pushed")
	require.Equal(t, "none", env("OTEL_METRICS_EXPORTER"))

	// The collector's configuration names only components its build holds.
	builder, err := os.ReadFile("../../deploy/collector/builder-config.yaml")
	require.NoError(t, err)
	for _, mod := range []string{"receiver/otlpreceiver", "processor/batchprocessor", "exporter/otlpexporter", "exporter/debugexporter"} {
		require.Contains(t, string(builder), "go.opentelemetry.io/collector/"+mod+" ")
	}

	// Metrics: Prometheus scrapes every rindled's /metrics and the collector's own metrics.
	promRaw, err := os.ReadFile("../../deploy/prometheus.yml")
	require.NoError(t, err)
	var promCfg struct {
		ScrapeConfigs []struct {
			JobName       string                       `yaml:"job_name"`
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(promRaw, &promCfg))
	require.Equal(t, "rindled", promCfg.ScrapeConfigs[0].JobName)
	require.Contains(t, promCfg.ScrapeConfigs[0].StaticConfigs[0].Targets, "rindled:8080")
	colMetrics := colCfg.Service.Telemetry.Metrics.Readers[0].Pull.Exporter.Prometheus
	require.Equal(t, []string{fmt.Sprintf("otel-collector:%d", colMetrics.Port)}, promCfg.ScrapeConfigs[1].StaticConfigs[0].Targets)
	require.Equal(t, "0.0.0.0", colMetrics.Host, "Prometheus reaches it from its own container")
	require.Contains(t, strings.Join(col.HealthCheck.Test, " "), fmt.Sprintf("/rindled health -url http://127.0.0.1:%d/metrics", colMetrics.Port))

	// Every service has a health check.
	for _, name := range names {
		if name == "secret" {
			continue // one-shot: its dependants wait for it to complete
		}
		require.NotNil(t, p.Services[name].HealthCheck, "%s has no health check", name)
	}

	// Every image the stack builds starts FROM the Debian base or scratch; the one official
	// image kept (Jaeger, for its UI) is pinned to a release.
	dockerfileText := string(dockerfile)
	base := regexp.MustCompile(`(?m)^ARG DEBIAN=(\S+)$`).FindStringSubmatch(dockerfileText)
	require.NotNil(t, base, "the Dockerfile names its Debian base")
	require.Regexp(t, `^debian:bookworm-\d{8}-slim$`, base[1], "the base is a dated Debian release")
	stages := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\S+))?$`).FindAllStringSubmatch(dockerfileText, -1) {
		require.Contains(t, []string{"${DEBIAN}", "scratch", "go"}, m[1], "FROM %s", m[1])
		stages[m[2]] = true
	}
	for _, name := range names {
		svc := p.Services[name]
		switch {
		case svc.Build != nil:
			require.True(t, stages[svc.Build.Target], "%s builds the Dockerfile's %q stage", name, svc.Build.Target)
			require.Contains(t, []string{"", "Dockerfile"}, svc.Build.Dockerfile, "%s: one Dockerfile", name)
		case name == "jaeger":
			require.Regexp(t, `^jaegertracing/all-in-one:\d+\.\d+\.\d+$`, svc.Image)
		default:
			require.Equal(t, base[1], svc.Image, "%s runs the Debian base", name)
		}
	}
	require.Contains(t, dockerfileText, "USER 65532:65532", "non-root, as the secret's file mode assumes")
	require.Contains(t, dockerfileText, "sha256sum -c", "the Go toolchain is checked")
	require.Contains(t, strings.Join(jg.HealthCheck.Test, " "), ":14269/", "Jaeger's admin port")
	require.Equal(t, "true", env("RINDLE_DEMO"), "the stack serves the demo page")
	require.Equal(t, "true", *jg.Environment["COLLECTOR_OTLP_ENABLED"])
	require.Equal(t, "rindled", rd.Build.Target, "rindled is built from this repository")
}

// TestComposeScaleProfile checks the "scale" profile: three instances on NATS JetStream with a
// slot of their own, behind an nginx proxy that balances, pins ?host=, and does not buffer.
func TestComposeScaleProfile(t *testing.T) {
	base, err := loadCompose(t, nil)
	require.NoError(t, err)
	require.NotContains(t, base.ServiceNames(), "nats", "the default stack is one instance")
	p, err := loadCompose(t, nil, "scale")
	require.NoError(t, err)
	names := p.ServiceNames()
	slices.Sort(names)
	require.Equal(t, []string{"jaeger", "nats", "otel-collector", "postgres", "prometheus", "proxy", "rindled", "rindled-1", "rindled-2", "rindled-3", "secret"}, names)
	for _, name := range []string{"rindled-1", "rindled-2", "rindled-3"} {
		checkSecretWiring(t, p, name)
	}

	known := map[string]bool{}
	_, err = parse("rindled", nil, func(k string) string { known[k] = true; return "" }, io.Discard, nil)
	require.NoError(t, err)
	nats := p.Services["nats"]
	require.Contains(t, []string(nats.Command), "-js", "JetStream on")
	require.Contains(t, []string(nats.Command), "-sd", "a store that survives restarts (the CDC stream is file-backed)")
	require.NotNil(t, nats.HealthCheck)

	nginx, err := os.ReadFile("../../deploy/nginx.conf")
	require.NoError(t, err)
	conf := string(nginx)
	require.Contains(t, conf, "proxy_buffering off;", "a buffering proxy holds tokens back")
	require.Contains(t, conf, "proxy_read_timeout 1h;")
	hosts := map[string]bool{}
	for _, name := range []string{"rindled-1", "rindled-2", "rindled-3"} {
		svc := p.Services[name]
		env := func(k string) string {
			v := svc.Environment[k]
			require.NotNil(t, v, "%s: %s", name, k)
			return *v
		}
		for k := range svc.Environment {
			require.True(t, known[k], "rindled does not read %s", k)
		}
		u, err := url.Parse(env("RINDLE_BROKER_URL"))
		require.NoError(t, err)
		require.Equal(t, "nats", u.Scheme)
		require.Equal(t, "nats", u.Hostname(), "%s reaches the nats service", name)
		require.Equal(t, "4222", u.Port())
		require.Equal(t, "rindle_scale", env("RINDLE_SLOT"), "the scale instances share a slot apart from the single instance's")
		require.Equal(t, types.ServiceConditionHealthy, svc.DependsOn["nats"].Condition)
		require.Equal(t, types.ServiceConditionHealthy, svc.DependsOn["postgres"].Condition)
		require.NotNil(t, svc.HealthCheck)
		require.Equal(t, "0.0.0.0:8080", env("RINDLE_ADDR"))
		host := env("RINDLE_HOST_ID")
		hosts[host] = true
		// The proxy balances over it, and ?host=<its Rindle-Host> pins to it.
		require.Contains(t, conf, "server "+name+":8080;")
		require.Regexp(t, `(?m)^\s*`+host+`\s+`+host+`;`, conf, "the proxy pins ?host=%s", host)
		require.Equal(t, types.ServiceConditionHealthy, p.Services["proxy"].DependsOn[name].Condition)
	}
	require.Len(t, hosts, 3, "host ids are unique")
	single := p.Services["rindled"].Environment
	require.Nil(t, single["RINDLE_SLOT"], "the single instance keeps the default slot")
	require.NotNil(t, p.Services["proxy"].HealthCheck)
}

// checkSecretWiring: the service reads its token secret from the file the one-shot secret
// service writes into the shared volume, after that service completed; and the secret
// service's own command, run here against a directory, writes 64 hex characters once and
// keeps them on the next start.
func checkSecretWiring(t *testing.T, p *types.Project, name string) {
	t.Helper()
	svc, sec := p.Services[name], p.Services["secret"]
	file := svc.Environment["RINDLE_JWT_SECRET_FILE"]
	require.NotNil(t, file, "%s reads its secret from a file", name)
	require.Nil(t, svc.Environment["RINDLE_JWT_SECRET"], "%s: both set is refused", name)
	require.Equal(t, types.ServiceConditionCompletedSuccessfully, svc.DependsOn["secret"].Condition, name)
	mounted := func(s types.ServiceConfig) string {
		for _, v := range s.Volumes {
			if v.Source == "secrets" {
				return v.Target
			}
		}
		return ""
	}
	dir := mounted(svc)
	require.NotEmpty(t, dir, "%s mounts the secrets volume", name)
	require.Equal(t, dir, mounted(sec), "one volume, one path")
	require.True(t, strings.HasPrefix(*file, dir+"/"), "%s's secret file is in the volume", name)

	script := []string(sec.Command)
	require.Equal(t, []string{"sh", "-c"}, script[:2])
	local := t.TempDir()
	shell := strings.ReplaceAll(script[2], dir, local)
	run := func() string {
		out, err := exec.Command("sh", "-c", shell).CombinedOutput()
		require.NoError(t, err, "%s", out)
		b, err := os.ReadFile(filepath.Join(local, strings.TrimPrefix(*file, dir+"/")))
		require.NoError(t, err)
		return string(b)
	}
	first := run()
	require.Regexp(t, `^[0-9a-f]{64}$`, first, "32 random bytes, hex")
	require.Equal(t, first, run(), "a restart keeps the secret (tokens stay valid)")
}
