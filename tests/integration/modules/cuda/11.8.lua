-- hpcmem integration-test stub: sets variables only, installs nothing.
help([[cuda 11.8 stub for the hpcmem Slurm lab]])
whatis("Name: cuda")
whatis("Version: 11.8")
family("cuda")
local root = pathJoin("/opt/hpcmem-lab/sw", "cuda", "11.8")
setenv("HPCMEM_CUDA_VERSION", "11.8")
setenv("CUDA_HOME", root)
prepend_path("PATH", pathJoin(root, "bin"))
