# rindled: a static binary on a minimal, non-root base.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/rindled ./cmd/rindled

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rindled /rindled
EXPOSE 8080
ENTRYPOINT ["/rindled"]
