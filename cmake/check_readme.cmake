# Fails unless README contains EXAMPLE's text verbatim.
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${EXAMPLE} verbatim; paste it into the API section")
endif()
