// The C++ drop-in, from the installed headers and library: prints their
// versions, the file the loader mapped and what a context round trip gave
// (packaging/install_test.go checks them).
#include <distautograd.hpp>

#include <fstream>
#include <iostream>
#include <string>

int main() {
  std::cout << "header " << DAC_VERSION_STRING << "\n";
  std::cout << "version " << dac_version() << "\n";
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    auto slash = line.find('/');
    if (slash != std::string::npos && line.find("libdistautograd", slash) != std::string::npos) {
      std::cout << "library " << line.substr(slash) << "\n";
      break;
    }
  }
  auto& container = distautograd::DistAutogradContainer::init(3);
  int64_t id;
  {
    distautograd::ContextGuard guard;
    id = guard.contextId();
    container.currentContext()->addKnownWorkerId(4);
  }
  std::cout << "context " << id << "\n";
  try {
    container.retrieveContext(id);
    return 1;
  } catch (const distautograd::Error& e) {
    std::cout << "after release: " << e.what() << "\n";
  }
  return 0;
}
