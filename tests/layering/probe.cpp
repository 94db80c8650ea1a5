// A translation unit that includes one header, named by the build (WALLFACER_PROBE_HEADER). The
// layering tests compile it against one component's target to prove what that component can and
// cannot see: a private header of another component, or a public header of a later stage.
#include WALLFACER_PROBE_HEADER

int wallfacer_layering_probe() {
  return 0;
}
