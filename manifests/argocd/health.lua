-- Argo CD health check for rlhf.dev/RLHFJob and rlhf.dev/RLHFPipeline (resource
-- customizations "rlhf.dev/RLHFJob" and "rlhf.dev/RLHFPipeline": the same script, which looks
-- at obj.kind).
--
-- Maps the operator's status (phase + conditions, see operator/src/rlhf_operator/api/v1alpha1/
-- status.py) to Argo CD health, following Argo CD's own rule for batch/v1 Jobs: a job that is
-- still working is Progressing, a finished one is Healthy, a failed one Degraded.
--
--   no status yet / stale observedGeneration  -> Progressing (the operator has not caught up)
--   Pending, Provisioning, Running            -> Progressing (message: admission, Ray cluster,
--                                                 step/total and reward)
--   Succeeded                                 -> Healthy
--   Failed, or condition Valid=False          -> Degraded (the spec or the run is broken)
--   Suspended                                 -> Suspended
--   any other phase                           -> Unknown
--
-- An RLHFPipeline (status.phase, status.progress = stages succeeded/total, status.message):
--   no status yet / stale observedGeneration  -> Progressing
--   Pending, Running                          -> Progressing (stages done, what runs)
--   Succeeded                                 -> Healthy
--   Failed (a stage failed), or Valid=False   -> Degraded
--   Suspended                                 -> Suspended
--   any other phase                           -> Unknown
--
-- Written for Argo CD's sandbox: Lua 5.1 (gopher-lua) with only the base, package and table
-- libraries (no `string`, no `math`, no string methods), so it also works without
-- `resource.customizations.useOpenLibs`. deploy_tests/test_argocd_health.py runs it with real
-- Lua 5.1 in that same sandbox against every case of health_test.yaml.

local function find_condition(status, condition_type)
  if status.conditions == nil then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if condition.type == condition_type then
      return condition
    end
  end
  return nil
end

local function condition_is(condition, value)
  return condition ~= nil and condition.status == value
end

-- "a: b" with empty or missing parts left out.
local function join(...)
  local parts = {}
  for i = 1, select("#", ...) do
    local part = select(i, ...)
    if part ~= nil and part ~= "" then
      table.insert(parts, part)
    end
  end
  return table.concat(parts, ": ")
end

local function condition_text(condition)
  if condition == nil then
    return ""
  end
  if condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return condition.reason or ""
end

-- x rounded to 4 decimals, as text (math.floor is not available: x - x % 1 is floor(x)).
local function round4(x)
  local scaled = x * 10000 + 0.5
  return tostring((scaled - scaled % 1) / 10000)
end

-- "step 120/500, reward 0.4312" from what the trainer reported in status.trainer.
local function progress_text(status)
  local trainer = status.trainer
  if trainer == nil then
    return ""
  end
  local parts = {}
  if trainer.progress ~= nil and trainer.progress ~= "" then
    table.insert(parts, "step " .. trainer.progress)
  elseif trainer.step ~= nil and trainer.totalSteps ~= nil then
    table.insert(parts, "step " .. tostring(trainer.step) .. "/" .. tostring(trainer.totalSteps))
  elseif trainer.step ~= nil and trainer.step > 0 then
    table.insert(parts, "step " .. tostring(trainer.step))
  end
  if trainer.reward ~= nil then
    table.insert(parts, "reward " .. round4(trainer.reward))
  end
  return table.concat(parts, ", ")
end

-- "text (step 50/500, reward 0.3)", or just text when the trainer reported nothing yet.
local function with_progress(text, status)
  local progress = progress_text(status)
  if progress == "" then
    return text
  end
  return text .. " (" .. progress .. ")"
end

local function health(status_value, message)
  return { status = status_value, message = message }
end

-- Progressing while the operator has not observed the latest spec, Degraded for a spec it
-- refused (Valid=False); nil otherwise.
local function stale_or_invalid(obj, status)
  local generation = obj.metadata and obj.metadata.generation
  if generation ~= nil and status.observedGeneration ~= nil
      and status.observedGeneration < generation then
    return health("Progressing", "Waiting for rlhf-operator to observe generation "
      .. tostring(generation) .. " (status is for " .. tostring(status.observedGeneration) .. ")")
  end
  local valid = find_condition(status, "Valid")
  if condition_is(valid, "False") then
    return health("Degraded", join("Invalid spec", condition_text(valid)))
  end
  return nil
end

local function assess(obj)
  local status = obj.status
  if status == nil or status.phase == nil or status.phase == "" then
    return health("Progressing", "Waiting for rlhf-operator to reconcile the job")
  end
  local phase = status.phase

  if phase == "Succeeded" then
    local complete = find_condition(status, "Complete")
    return health("Healthy", with_progress(join("Succeeded", condition_text(complete)), status))
  end
  if phase == "Failed" then
    local failed = find_condition(status, "Failed")
    local why = condition_text(failed)
    if why == "" then
      why = status.message or ""
    end
    return health("Degraded", join("Failed", why))
  end

  -- A spec change the operator has not processed yet: the rest of the status describes the old
  -- spec. (Finished jobs are judged by their result above, whatever was edited afterwards.)
  local unsettled = stale_or_invalid(obj, status)
  if unsettled ~= nil then
    return unsettled
  end

  if phase == "Suspended" then
    local suspended = find_condition(status, "Suspended")
    return health("Suspended", with_progress(join("Suspended", condition_text(suspended)), status))
  end
  if phase == "Pending" then
    local admitted = find_condition(status, "Admitted")
    if condition_is(admitted, "False") then
      return health("Progressing", join("Waiting for admission", condition_text(admitted)))
    end
    return health("Progressing", join("Pending", status.message))
  end
  if phase == "Provisioning" then
    local cluster = find_condition(status, "ClusterReady")
    return health("Progressing", join("Provisioning the Ray cluster", condition_text(cluster)))
  end
  if phase == "Running" then
    local failed = find_condition(status, "Failed")
    if condition_is(failed, "True") then
      -- The run failed but retries remain: it resumes from the latest checkpoint.
      local retrying = "Retrying (restart " .. tostring(status.restarts or 0) .. ")"
      return health("Progressing", with_progress(join(retrying, condition_text(failed)), status))
    end
    return health("Progressing", join("Running", progress_text(status)))
  end
  return health("Unknown", "Unknown phase " .. tostring(phase))
end

-- "stages 1/3: running stage rm", from status.progress and status.message.
local function stages_text(status)
  local progress = ""
  if status.progress ~= nil and status.progress ~= "" then
    progress = "stages " .. status.progress
  end
  return join(progress, status.message)
end

local function assess_pipeline(obj)
  local status = obj.status
  if status == nil or status.phase == nil or status.phase == "" then
    return health("Progressing", "Waiting for rlhf-operator to reconcile the pipeline")
  end
  local phase = status.phase
  if phase == "Succeeded" then
    return health("Healthy", join("Succeeded", stages_text(status)))
  end
  local unsettled = stale_or_invalid(obj, status)
  if unsettled ~= nil then
    return unsettled
  end
  if phase == "Failed" then
    return health("Degraded", join("Failed", stages_text(status)))
  end
  if phase == "Suspended" then
    return health("Suspended", join("Suspended", stages_text(status)))
  end
  if phase == "Pending" or phase == "Running" then
    return health("Progressing", join(phase, stages_text(status)))
  end
  return health("Unknown", "Unknown phase " .. tostring(phase))
end

if obj.kind == "RLHFPipeline" then
  return assess_pipeline(obj)
end
return assess(obj)
