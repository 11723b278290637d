-- 13.1.0 is also the highest version; the marker makes the default explicit.
module_version("gcc/13.1.0", "default")
