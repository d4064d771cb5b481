// The keywords of robot-ansible-worker (Run Action, Gather Facts, one per modules= entry) and the import
// that makes them; each runs ansible-playbook or ansible-doc in the worker's Workspace.
#pragma once

#include "workers/ansible/workspace.hpp"
#include "workers/sdk/sdk.hpp"

#include <boost/json.hpp>

#include <string>
#include <vector>

namespace rjg::ansible {

// Set from the command line before serving, read by the keywords.
extern Workspace& workspace;
extern std::vector<std::string> allow_list;       // --allow MODULE
extern std::vector<std::string> allowed_options;  // --allow-option MODULE.OPTION
extern bool facts_env;                            // --facts-env: facts keep ansible_env

void on_import(const sdk::Library& library, sdk::ImportContext& context);
// Run Action  MODULE  check_mode=False  diff=False  **options
boost::json::value run_action(sdk::Call& call);
boost::json::value gather_facts(sdk::Call& call);
// Keywords of modules= entries: the name called, named options only.
boost::json::value module_keyword_call(sdk::Call& call);

}  // namespace rjg::ansible
