# The OpenTelemetry collector with a health probe. The upstream image is FROM scratch: no shell,
# no wget, so a compose health check has nothing to run. This adds busybox's static (musl)
# binary, whose wget probes the collector's health_check extension. Nothing is compiled.
FROM busybox:1.37.0-musl AS probe

FROM otel/opentelemetry-collector-contrib:0.138.0
COPY --from=probe /bin/busybox /busybox
