-- Not the highest version on purpose: `module load cuda` picking 11.8 proves
-- that Lmod read this file.
module_version("cuda/11.8", "default")
