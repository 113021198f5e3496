# rindled: a static binary on an empty base, as a non-root user. Every base is pinned: the
# build image to a Go release, and the runtime base is scratch (nothing in it to float), with
# the CA bundle copied from the build image for TLS to a managed database or collector.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The source has no .git here (.dockerignore), so the version comes in as a build argument
# (docker compose build --build-arg RINDLE_VERSION=v1.2.3); rindled version prints it.
ARG RINDLE_VERSION=devel-image
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.buildVersion=${RINDLE_VERSION}" -o /out/rindled ./cmd/rindled

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/rindled /rindled
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/rindled"]
