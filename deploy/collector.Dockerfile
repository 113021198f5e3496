# The OpenTelemetry collector with a health probe. The upstream image is FROM scratch: no shell,
# no curl, so a compose health check has nothing to run. This adds rindled (static), whose
# `health -url` probes the collector's health_check extension.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/rindled ./cmd/rindled

FROM otel/opentelemetry-collector-contrib:0.111.0
COPY --from=build /out/rindled /rindled
