//go:build ignore

// descset writes the FileDescriptorSet of remote_execution.proto and everything
// it imports, as compiled into the remote-apis Go module, and field_mask.proto, so
// that protoc can resolve the imports of buildstream.proto (and of
// internal/rwapipb's bots.proto) without a checkout of googleapis.
//
//	go run descset.go OUT
package main

import (
	"log"
	"os"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go run descset.go OUT")
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) { // dependencies first, as protoc wants
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(repb.File_build_bazel_remote_execution_v2_remote_execution_proto)
	add(fieldmaskpb.File_google_protobuf_field_mask_proto)
	data, err := proto.Marshal(set)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(os.Args[1], data, 0o644); err != nil {
		log.Fatal(err)
	}
}
