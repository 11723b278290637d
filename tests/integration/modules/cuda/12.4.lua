-- hpcmem integration-test stub: sets variables only, installs nothing.
help([[cuda 12.4 stub for the hpcmem Slurm lab]])
whatis("Name: cuda")
whatis("Version: 12.4")
family("cuda")
local root = pathJoin("/opt/hpcmem-lab/sw", "cuda", "12.4")
setenv("HPCMEM_CUDA_VERSION", "12.4")
setenv("CUDA_HOME", root)
prepend_path("PATH", pathJoin(root, "bin"))
