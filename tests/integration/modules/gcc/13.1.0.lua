-- hpcmem integration-test stub: sets variables only, installs nothing.
help([[gcc 13.1.0 stub for the hpcmem Slurm lab]])
whatis("Name: gcc")
whatis("Version: 13.1.0")
family("gcc")
local root = pathJoin("/opt/hpcmem-lab/sw", "gcc", "13.1.0")
setenv("HPCMEM_GCC_VERSION", "13.1.0")
setenv("GCC_HOME", root)
prepend_path("PATH", pathJoin(root, "bin"))
