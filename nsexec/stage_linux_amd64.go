package nsexec

import _ "embed"

//go:generate stage/build.sh

// stageELF is the C stage linked on its own with musl by stage/build.sh;
// stageSources lists the digests of the files it was built from
// (TestStageUpToDate).
var (
	//go:embed stage_linux_amd64.bin
	stageELF []byte
	//go:embed stage_linux_amd64.sources
	stageSources string
)
