# The sweeper's image, which also holds cairnd (docker-compose.yml runs it
# with --entrypoint /usr/local/bin/cairnd): built in the Go image the module asks for, run from a
# distroless image (no shell, no package manager) as its non-root user.
#
#   docker build -t cairn-sweeper .
#   docker run --rm cairn-sweeper --help
#
# httpprobe is the image's health check (there is no curl here):
#   httpprobe http://127.0.0.1:9090/healthz   with the sweeper's --listen=:9090

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
RUN go build -trimpath -ldflags="-s -w" -o /out/sweeper ./cmd/sweeper \
 && go build -trimpath -ldflags="-s -w" -o /out/cairnd ./cmd/cairnd \
 && go build -trimpath -ldflags="-s -w" -o /out/httpprobe ./internal/httpprobe

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sweeper /out/cairnd /out/httpprobe /usr/local/bin/
USER 65532:65532
EXPOSE 9090 8080
ENTRYPOINT ["/usr/local/bin/sweeper"]
CMD ["--help"]
