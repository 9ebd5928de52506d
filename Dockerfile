# Two images, one per binary, built in the Go image the module asks for and
# run from a distroless image (no shell, no package manager) as its non-root
# user:
#
#   docker build --target cairnd -t cairnd .
#   docker build -t cairn-sweeper .        # the last target: the sweeper
#   docker run --rm cairn-sweeper --help
#
# The sweeper's image also holds cairnd (docker-compose.yml runs it with
# --entrypoint /usr/local/bin/cairnd). deploy/kubernetes runs each image as
# the container of its name. make release builds both with VERSION and
# REVISION stamped into the binaries (--version, cairn_build_info).
#
# httpprobe is the images' health check (there is no curl here):
#   httpprobe http://127.0.0.1:9090/healthz   with the sweeper's --listen=:9090

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
ARG VERSION=""
ARG REVISION=""
RUN stamp="-s -w -X github.com/cairnstore/cairn/internal/buildinfo.stamped=${VERSION} -X github.com/cairnstore/cairn/internal/buildinfo.stampedRevision=${REVISION}" \
 && go build -trimpath -ldflags="$stamp" -o /out/sweeper ./cmd/sweeper \
 && go build -trimpath -ldflags="$stamp" -o /out/cairnd ./cmd/cairnd \
 && go build -trimpath -ldflags="-s -w" -o /out/httpprobe ./internal/httpprobe

FROM gcr.io/distroless/static-debian12:nonroot AS cairnd
COPY --from=build /out/cairnd /out/httpprobe /usr/local/bin/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/cairnd"]
CMD ["--help"]

FROM gcr.io/distroless/static-debian12:nonroot AS sweeper
COPY --from=build /out/sweeper /out/cairnd /out/httpprobe /usr/local/bin/
USER 65532:65532
EXPOSE 9090 8080
ENTRYPOINT ["/usr/local/bin/sweeper"]
CMD ["--help"]
