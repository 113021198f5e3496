# Every image of the compose stack, one stage each, all FROM a Debian base or scratch:
#
#   rindled (the default target)   a static binary on scratch, as a non-root user
#   nats                           nats-server, the version go.mod pins, on scratch
#   otel-collector                 a collector of just the components the stack uses (deploy/collector), on scratch
#   postgres                       Debian's postgresql-15 with logical replication
#   prometheus                     Debian's prometheus
#   proxy                          Debian's nginx
#
# The Go toolchain comes from the Go module proxy (the zip `go` itself downloads for a
# GOTOOLCHAIN switch), checked against a pinned SHA-256. The Debian base is the only image
# pulled; on a machine without a registry, .ci/compose makes it with debootstrap under the
# same name.
ARG DEBIAN=debian:bookworm-20250520-slim

FROM ${DEBIAN} AS go
ARG TARGETARCH=amd64
ARG GO_VERSION=1.26.8
ARG GOPROXY=https://proxy.golang.org
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates curl unzip >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir /out && cp /etc/ssl/certs/ca-certificates.crt /out/
# Behind a TLS-inspecting proxy, its CA (a .crt file in deploy/extra-ca/) is trusted for the
# downloads of the build, and never reaches an image: rindled's carries Debian's bundle as is.
COPY deploy/extra-ca/ /usr/local/share/ca-certificates/extra/
RUN update-ca-certificates >/dev/null
RUN set -eu; \
    case "${TARGETARCH}" in \
      amd64) sum=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7 ;; \
      arm64) sum=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99 ;; \
      *) echo "no pinned Go toolchain for ${TARGETARCH}" >&2; exit 1 ;; \
    esac; \
    curl -fsSL -o /tmp/go.zip "${GOPROXY%%,*}/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-${TARGETARCH}.zip"; \
    echo "${sum}  /tmp/go.zip" | sha256sum -c -; \
    unzip -q /tmp/go.zip -d /tmp/go; \
    mv "/tmp/go/golang.org/toolchain@v0.0.1-go${GO_VERSION}.linux-${TARGETARCH}" /usr/local/go; \
    rm -rf /tmp/go /tmp/go.zip
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 GOTOOLCHAIN=local GOPROXY=${GOPROXY}

FROM go AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The source has no .git here (.dockerignore), so the version comes in as a build argument
# (docker compose build --build-arg RINDLE_VERSION=v1.2.3); rindled version prints it.
ARG RINDLE_VERSION=devel-image
RUN go build -trimpath -ldflags "-X main.buildVersion=${RINDLE_VERSION}" -o /out/rindled ./cmd/rindled \
 && go build -trimpath -o /out/nats-server github.com/nats-io/nats-server/v2 \
 && mkdir -p /out/natsdata

FROM go AS collector-build
WORKDIR /src
COPY deploy/collector/go.mod deploy/collector/go.sum ./
RUN go mod download
COPY deploy/collector/*.go ./
RUN go build -trimpath -o /out/otelcol .

# The images without a shell probe their health with `rindled health -url`.
FROM scratch AS nats
COPY --from=build /out/nats-server /nats-server
COPY --from=build --chown=65532:65532 /out/natsdata /data
COPY --from=build /out/rindled /rindled
USER 65532:65532
ENTRYPOINT ["/nats-server"]

FROM scratch AS otel-collector
COPY --from=collector-build /out/otelcol /otelcol
COPY --from=build /out/rindled /rindled
COPY deploy/otel-collector.yaml /etc/otelcol/config.yaml
USER 65532:65532
ENTRYPOINT ["/otelcol"]
CMD ["--config=/etc/otelcol/config.yaml"]

FROM ${DEBIAN} AS postgres
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY deploy/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
# A fast shutdown (SIGINT): SIGTERM's smart shutdown waits for every client to leave.
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint"]

FROM ${DEBIAN} AS prometheus
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus curl >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY deploy/prometheus.yml /etc/prometheus/prometheus.yml
USER prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/var/lib/prometheus/metrics2"]

FROM ${DEBIAN} AS proxy
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx curl >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY deploy/nginx.conf /etc/nginx/nginx.conf
STOPSIGNAL SIGQUIT
EXPOSE 80
CMD ["nginx", "-g", "daemon off;"]

# rindled, last: the target of a plain `docker build .`.
FROM scratch AS rindled
COPY --from=go /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/rindled /rindled
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/rindled"]
