// Package bucket stores the bytes of sandbox checkpoints: the content-addressed
// file and artifact blobs that checkpoints reference by key.
//
// Bucket is the small object-store interface the rest of the module uses: Get,
// Head, PutIfAbsent, List (one page at a time, or every object with Objects)
// and a batched Delete. S3 implements it over any S3-compatible service
// (Cloudflare R2, AWS S3, versitygw, ...) and Memory implements it in memory
// for tests and quick starts.
//
// # Content addressing
//
// FileKey and ArtifactKey name bytes by their SHA-256 digest, UploadBlobs
// claims each distinct blob of a capture for the writer's lease and then puts
// it only when the bucket lacks it, and ReadBlob reads a blob back and checks
// that its bytes still hash to its key.
//
// UploadBlobs is the upload that is safe beside a running sweeper: the claim,
// made in the store before the bucket is asked whether it has the bytes, is
// what stops a sweep from deleting bytes that a capture decided to reuse.
// PutBlobs is the same upload without the claim, for callers that bring their
// own protocol; with a sweeper running it can lose the bytes it reuses.
//
// # Errors
//
// Every failed operation returns an *Error. Match its kind with errors.Is
// against the sentinels ErrNotFound, ErrNoSuchBucket, ErrAccessDenied,
// ErrInvalidCredentials, ErrPreconditionFailed, ErrConflict, ErrUnreachable
// and ErrInvalidKey; errors.As still reaches the underlying SDK error:
//
//	if errors.Is(err, bucket.ErrNotFound) { ... }
//
// Context cancellation and deadline errors are returned as they are, without a
// wrapper.
//
// # Conditional puts
//
// PutIfAbsent sends If-None-Match: * (PutModeConditional) where the server
// honours it; Cloudflare R2 and AWS S3 do. For a server that does not, choose
// PutModeHeadThenPut, which heads the key and puts only when it is missing (two
// writers may then both put, which is harmless for content-addressed keys), or
// PutModeAuto, which probes the server once with DetectPutMode. Some servers
// ignore the header silently and overwrite; DetectPutMode catches them.
package bucket
